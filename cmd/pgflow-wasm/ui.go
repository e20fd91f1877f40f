package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
)

// uiFlags are the dashboard's flags, shared by `ui` and `serve` (where --ui-addr is empty,
// so off, by default).
func uiFlags(defaultAddr string) []cli.Flag {
	addrUsage := "serve the web dashboard on this address (loopback unless --ui-token is given), e.g. 127.0.0.1:8080"
	if defaultAddr == "" {
		addrUsage += "; empty: no dashboard"
	}
	return []cli.Flag{
		altsrc.NewStringFlag(&cli.StringFlag{Name: "ui-addr", Value: defaultAddr, EnvVars: env("ui-addr"), Usage: addrUsage}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "ui-token", EnvVars: env("ui-token"),
			Usage: "secret every dashboard request must carry (open the dashboard once with ?token=...); required for a non-loopback --ui-addr; at least 16 characters"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "ui-token-file", EnvVars: env("ui-token-file"),
			Usage: "read --ui-token from this file (keeps it out of the process list)"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "ui-actions", EnvVars: env("ui-actions"),
			Usage: "let the dashboard start, cancel and rerun runs, and drain, undrain and deprecate workers (each action is logged and audited); read-only without it"}),
		durationFlag("ui-poll-interval", time.Second,
			"dashboard: how often a page showing something still running is re-read besides its run events"),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "trace-url", EnvVars: env("trace-url"),
			Usage: "dashboard: link each run page to the run's trace, {trace_id} and {run_id} filled in, e.g. 'https://tempo.example/trace/{trace_id}'"}),
	}
}

func uiCommand() *cli.Command {
	flags := []cli.Flag{dbFlag(), optionalFlowsFlag()}
	flags = append(flags, engineFlags()...)
	flags = append(flags, uiFlags(dashboard.DefaultAddr)...)
	flags = append(flags,
		durationFlag("worker-stale-after", pgflowwasm.WorkerStaleAfterDefault, "a worker silent this long is shown as dead (the workers' own --worker-stale-after)"))
	flags = append(flags, logFlags()...)
	return withConfigFile(&cli.Command{
		Name:  "ui",
		Usage: "serve the web dashboard: runs, steps, tasks, flows and workers, live in a browser",
		Description: "Serves the dashboard on --ui-addr (default " + dashboard.DefaultAddr + ", this machine only) until\n" +
			"SIGINT or SIGTERM. It reads pgflow's tables; pages update live (run events through\n" +
			"LISTEN, with polling as a fallback). With --flows it also shows each step's module\n" +
			"(sha256, ABI version). It is read-only unless --ui-actions is given.\n\n" +
			"Any address but loopback needs --ui-token (or --ui-token-file): every request and\n" +
			"event stream must then carry it; open the dashboard once with ?token=TOKEN and the\n" +
			"browser keeps a session cookie. Put TLS in front (a reverse proxy or an SSH tunnel)\n" +
			"when the network between you and it is not trusted.\n\n" +
			"Examples:\n" +
			"   pgflow-wasm ui                                  # http://127.0.0.1:8080/\n" +
			"   pgflow-wasm ui --ui-addr :8080 --ui-token-file /run/secrets/ui-token --ui-actions",
		Flags:  flags,
		Action: uiAction,
	})
}

// optionalFlowsFlag is --flows for commands that work without the file.
func optionalFlowsFlag() cli.Flag {
	return altsrc.NewStringFlag(&cli.StringFlag{Name: "flows", Value: "flows.yaml", EnvVars: env("flows"),
		Usage: "the flows file whose modules the flows page describes; skipped when the default one is missing"})
}

func uiAction(c *cli.Context) error {
	log, err := newLogger(c, os.Stderr)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(log)
	defer stop()
	cfg, err := dashboardConfig(c, log)
	if err != nil {
		return err
	}
	cfg.WorkerStaleAfter = c.Duration("worker-stale-after")
	file, err := loadOptionalFlows(c, log)
	if err != nil {
		return err
	}
	if file != nil {
		cfg.Flows = func() *flowfile.File { return file }
		engine, err := sandbox.New(c.String("engine"), sandbox.Config{CacheDir: c.String("cache-dir")})
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		cfg.Modules, err = dashboard.LoadModules(ctx, file, engine)
		engine.Close(context.Background())
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
	}
	pool, err := openPgflow(ctx, c, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg.Pool = pool
	srv, err := startDashboard(ctx, c, cfg, log)
	if err != nil {
		return err
	}
	<-ctx.Done()
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Close(closeCtx)
}

// loadOptionalFlows loads --flows; a missing default file is not an error (the dashboard
// then shows no modules), a missing file named on purpose is.
func loadOptionalFlows(c *cli.Context, log *slog.Logger) (*flowfile.File, error) {
	path := c.String("flows")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && !c.IsSet("flows") {
		log.Info("no flows file: the flows page shows no modules (pass --flows FILE)", "flows", path)
		return nil, nil
	}
	file, err := flowfile.Load(path)
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	return file, nil
}

// dashboardConfig reads the dashboard flags common to `ui` and `serve`.
func dashboardConfig(c *cli.Context, log *slog.Logger) (dashboard.Config, error) {
	cfg := dashboard.Config{Log: log, Actions: c.Bool("ui-actions"), PollInterval: c.Duration("ui-poll-interval"),
		Token: c.String("ui-token"), TraceURL: c.String("trace-url")}
	if err := dashboard.CheckTraceURL(cfg.TraceURL); err != nil {
		return cfg, cli.Exit("--trace-url: "+err.Error(), 2)
	}
	if p := c.String("ui-token-file"); p != "" {
		if cfg.Token != "" {
			return cfg, cli.Exit("--ui-token and --ui-token-file both given: use one", 2)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return cfg, cli.Exit(fmt.Sprintf("--ui-token-file: %v", err), 2)
		}
		cfg.Token = strings.TrimSpace(string(b))
		if cfg.Token == "" {
			return cfg, cli.Exit(fmt.Sprintf("--ui-token-file %s is empty", p), 2)
		}
	}
	return cfg, nil
}

// startDashboard listens on --ui-addr; a refused address or token is a usage error.
func startDashboard(ctx context.Context, c *cli.Context, cfg dashboard.Config, log *slog.Logger) (*dashboard.Server, error) {
	addr := c.String("ui-addr")
	srv, err := dashboard.Listen(ctx, addr, cfg)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("--ui-addr %s: %v", addr, err), 2)
	}
	msg := "dashboard: open " + srv.URL()
	if cfg.Token != "" {
		msg += "?token=<your --ui-token> once"
	}
	log.Info(msg, "addr", srv.Addr(), "actions", cfg.Actions, "token", cfg.Token != "")
	return srv, nil
}

// serveDashboard starts the dashboard beside a worker when --ui-addr is given; the returned
// function stops it.
func serveDashboard(ctx context.Context, c *cli.Context, pool *pgxpool.Pool, cfg dashboard.Config, log *slog.Logger) (func(), error) {
	if c.String("ui-addr") == "" {
		return func() {}, nil
	}
	cfg.Pool = pool
	srv, err := startDashboard(ctx, c, cfg, log)
	if err != nil {
		return nil, err
	}
	return func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(closeCtx)
	}, nil
}
