package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

func engineFlags() []cli.Flag {
	return []cli.Flag{
		altsrc.NewStringFlag(&cli.StringFlag{Name: "engine", Value: "wazero", EnvVars: env("engine"),
			Usage: "WebAssembly engine: wazero (pure Go) or wasmtime (needs a binary built with -tags wasmtime)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "cache-dir", Value: sandbox.DefaultCacheDir(), EnvVars: env("cache-dir"),
			Usage: "on-disk cache of compiled modules (empty disables it)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "max-input-size", Value: bytesize.Flag(sandbox.DefaultMaxInputBytes), EnvVars: env("max-input-size"),
			Usage: "largest task input a handler is given, e.g. 16MiB; a larger one fails its task with input_too_large"}),
	}
}

func durationFlag(name string, value time.Duration, usage string) cli.Flag {
	return altsrc.NewDurationFlag(&cli.DurationFlag{Name: name, Value: value, Usage: usage, EnvVars: env(name)})
}

func intFlag(name string, value int, usage string) cli.Flag {
	return altsrc.NewIntFlag(&cli.IntFlag{Name: name, Value: value, Usage: usage, EnvVars: env(name)})
}

func serveCommand() *cli.Command {
	d := pgflowwasm.DefaultConfig()
	flags := []cli.Flag{flowsFlag(), dbFlag()}
	flags = append(flags, engineFlags()...)
	flags = append(flags,
		intFlag("concurrency", d.Concurrency, "handlers running at once across all flows (for CPU-heavy handlers, about the number of cores)"),
		intFlag("batch-size", d.BatchSize, "messages read per poll (at most --concurrency are useful)"),
		intFlag("max-connections", 8, "size of the database connection pool; the worker also keeps one connection for its liveness lock\n"+
			"\tand heartbeat, one for --signal notify, and on pgflow 0.13.2+ two while long tasks run (the requeue guard)"),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "signal", Value: string(d.Signal), EnvVars: env("signal"),
			Usage: "how to learn about new tasks: notify (LISTEN/NOTIFY with a fallback poll; a queue that cannot notify is polled)\n" +
				"\tor polling (adaptive backoff only: a new run's first step waits for a poll, while a busy chain's next step starts\n" +
				"\ta little sooner than under notify, see docs/benchmarks-history.md \"Awaited completions at once under notify too\")"}),
		durationFlag("min-poll-interval", d.MinPollInterval, "polling: shortest wait between polls of an idle queue"),
		durationFlag("max-poll-interval", d.MaxPollInterval, "polling: longest wait between polls of an idle queue"),
		durationFlag("notify-fallback", d.NotifyFallback, "notify: poll this often even without notifications (messages that become visible again\n"+
			"\tafter a delay, such as retries, send none)"),
		durationFlag("heartbeat-interval", d.HeartbeatInterval, "how often the worker's pgflow.workers rows are touched"),
		durationFlag("worker-stale-after", d.WorkerStaleAfter, "recovery: a pgflow-wasm worker silent this long is dead and its tasks are requeued"),
		durationFlag("liveness-grace", d.LivenessGrace, "recovery: a pgflow-wasm worker whose liveness lock has been gone this long (its process\n"+
			"\tdied) is dead; a worker whose connection broke retakes its lock within a second or two"),
		durationFlag("foreign-worker-stale-after", d.ForeignStaleAfter, "recovery: tasks of other kinds of workers (pgflow's TypeScript worker), which may run\n"+
			"\thandlers for any time, are requeued only once their worker's heartbeat is this old; 0 never"),
		durationFlag("recovery-interval", d.RecoveryInterval, "recovery: how often to look for stalled tasks"),
		durationFlag("stalled-margin", d.StalledMargin, "recovery: a pgflow-wasm task started longer ago than its timeout plus this is requeued\n"+
			"\t(under the 30 s pgflow 0.13.2+'s own requeue adds to a flow's timeout, so this sweep acts first)"),
		durationFlag("pgflow-check-interval", d.PgflowCheckInterval, "how often to look whether pgflow was upgraded under the worker (a fetch\n"+
			"\tafter a db install migration, and errors a changed schema causes, look at once; docs/deploy.md \"Upgrading pgflow\")"),
		durationFlag("drain-timeout", d.DrainTimeout, "shutdown: how long running tasks may finish; the rest are failed for a retry"),
		durationFlag("attempt-history", d.AttemptHistory, "how long failed attempts are kept in pgflow_wasm.task_attempts (pgflow keeps only\n"+
			"\ta task's last error; `run` and the dashboard show every attempt); negative keeps none"),
		intFlag("completion-batch", d.CompletionBatch, "outcomes written per transaction (1 writes each task alone, as pgflow's own workers do)"),
		intFlag("completion-writers", d.CompletionWriters, "outcome-writing transactions in flight at once (the second starts for a backlog of 16, or under --signal polling at once for a completion a served step waits for)"),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "fetch-leases", Value: "auto", EnvVars: env("fetch-leases"),
			Usage: "how many workers read one queue at a time; the others wait until a reader's handlers are the\n" +
				"\tlimit or its queue is empty. auto: one, once two or more live workers serve the queue's flow (so\n" +
				"\tmany workers of quick handlers on a small database stay as fast as one, docs/deploy.md);\n" +
				"\ta number: that many, always; off: every worker reads"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "metrics-addr", EnvVars: env("metrics-addr"),
			Usage: "serve /metrics, /livez and /readyz on this address, e.g. :9090"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "update-options", Value: true, EnvVars: env("update-options"),
			Usage: "write changed flow and step options (attempts, delays, timeouts) to the database at start and at every reload\n" +
				"\t(--update-options=false only logs the differences)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "prune-older-than", EnvVars: env("prune-older-than"),
			Usage: "prune finished runs older than this `AGE` (e.g. 30d, 12h) every --prune-interval, as `db prune` does;\n" +
				"\tof the workers on one database one prunes at a time (docs/operations.md \"Retention\"); default: never"}),
		durationFlag("prune-interval", time.Hour, "with --prune-older-than: how often to prune"),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "soft-memory-limit", Value: "auto", EnvVars: env("soft-memory-limit"),
			Usage: "the Go runtime's soft memory limit: past it the garbage collector runs sooner than GOGC's 400% would.\n" +
				"\tauto: 16MiB plus 768KiB per --concurrency handler (40MiB at 32), or the live heap plus 8MiB and 256KiB per\n" +
				"\thandler if that is more (re-read every second); a size such as 96MiB; 0 for none. Handlers' linear memories of\n" +
				"\t1MiB and more are outside it; GOMEMLIMIT, when set, wins (docs/RATIONALE.md)"}),
		durationFlag("watch-interval", d.WatchInterval, "how often flows.yaml and its modules are checked for changes (a changed file\n"+
			"\tis reloaded: new tasks use it, running ones finish on the old); 0 turns watching off (SIGHUP still reloads)"),
	)
	flags = append(flags, uiFlags("")...)
	flags = append(flags, logFlags()...)
	flags = append(flags, &cli.StringFlag{Name: "cpu-profile", Hidden: true, Usage: "write a CPU profile of the whole run to this file"})
	return withConfigFile(&cli.Command{
		Name:  "serve",
		Usage: "compile the flows of flows.yaml and run their tasks until stopped",
		Description: "Loads flows.yaml, validates every module, compiles the flows into pgflow (as `compile`\n" +
			"does), registers one worker per flow and runs tasks in fresh WebAssembly sandboxes.\n" +
			"SIGTERM or SIGINT drains running tasks (up to --drain-timeout) and exits 0; a second\n" +
			"signal exits at once (the stalled-task sweep of any worker requeues what was running).\n\n" +
			"Example:\n   DATABASE_URL=postgres://localhost/app pgflow-wasm serve --signal notify --metrics-addr :9090",
		Flags:  flags,
		Action: serve,
	})
}

// serveConfig is the client configuration the flags ask for.
func serveConfig(c *cli.Context, log *slog.Logger, reload <-chan os.Signal) (pgflowwasm.Config, error) {
	maxInput, err := maxInputFlag(c)
	if err != nil {
		return pgflowwasm.Config{}, err
	}
	leases, err := fetchLeases(c.String("fetch-leases"))
	if err != nil {
		return pgflowwasm.Config{}, err
	}
	return pgflowwasm.Config{
		FlowsPath: c.String("flows"), WatchInterval: watchInterval(c.Duration("watch-interval")), Reload: reload,
		KeepDatabaseOptions: !c.Bool("update-options"),
		Engine:              c.String("engine"),
		Sandbox:             sandbox.Config{CacheDir: c.String("cache-dir"), MaxInputBytes: maxInput},
		Logger:              log, ExitOnRestart: true,
		Concurrency: c.Int("concurrency"), BatchSize: c.Int("batch-size"), Signal: pgflowtype.Signal(c.String("signal")),
		MinPollInterval: c.Duration("min-poll-interval"), MaxPollInterval: c.Duration("max-poll-interval"),
		NotifyFallback: c.Duration("notify-fallback"), HeartbeatInterval: c.Duration("heartbeat-interval"),
		WorkerStaleAfter: c.Duration("worker-stale-after"), RecoveryInterval: c.Duration("recovery-interval"),
		LivenessGrace: c.Duration("liveness-grace"), ForeignStaleAfter: foreignStaleAfter(c.Duration("foreign-worker-stale-after")),
		StalledMargin: c.Duration("stalled-margin"), DrainTimeout: c.Duration("drain-timeout"),
		PgflowCheckInterval: c.Duration("pgflow-check-interval"),
		AttemptHistory:      c.Duration("attempt-history"),
		CompletionBatch:     c.Int("completion-batch"), CompletionWriters: c.Int("completion-writers"),
		FetchLeases: leases,
	}, nil
}

func serve(c *cli.Context) error {
	log, err := newLogger(c, os.Stderr)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(log)
	defer stop()
	if os.Getenv("GOGC") == "" {
		// The worker's live heap is small and short-lived garbage (instances, rows, JSON)
		// dominates: collecting at 5x the live heap instead of 2x cut its CPU per task from
		// about 90 to 50 us in the benchmark, for about 10 MB more memory (docs/RATIONALE.md).
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limit, err := parseMemoryLimit(c.String("soft-memory-limit"), c.Int("concurrency"))
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		held := make(chan struct{})
		defer func() { <-held }()
		limitCtx, stopLimit := context.WithCancel(ctx)
		defer stopLimit()
		go func() {
			defer close(held)
			limit.hold(limitCtx)
		}()
	}
	if p := c.String("cpu-profile"); p != "" {
		stopProfile, err := startCPUProfile(p)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	var pruneAge time.Duration
	if s := c.String("prune-older-than"); s != "" {
		if pruneAge, err = pgflowwasm.ParseAge(s); err != nil {
			return cli.Exit("--prune-older-than: "+err.Error(), 2)
		}
	}
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	// Traces: off unless OTEL_TRACES_EXPORTER asks.
	tracer, err := pgflowwasm.TracingFromEnv(ctx)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if tracer != nil {
		log = slog.New(tracer.LogHandler(log.Handler()))
		log.Info("tracing tasks: spans exported with OTLP (OTEL_* variables)")
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tracer.Shutdown(sctx); err != nil {
				log.Warn("traces: the last spans were not sent", "error", err)
			}
		}()
	}
	cfg, err := serveConfig(c, log, reload)
	if err != nil {
		return err
	}
	cfg.Hooks = pgflowtype.ChainHooks(cfg.Hooks, tracer.Hooks())
	hooks, closeTrace, err := taskTrace(cfg.Hooks)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	defer closeTrace()
	cfg.Hooks = hooks
	cfg.PruneOlderThan, cfg.PruneInterval = pruneAge, c.Duration("prune-interval")
	extraConn := int32(0)
	if pruneAge > 0 {
		extraConn++ // a batch holds one connection for its transaction
	}
	switch cfg.Signal {
	case pgflowtype.SignalPolling:
	case pgflowtype.SignalNotify:
		extraConn++
	default:
		return cli.Exit(fmt.Sprintf("--signal %q: use polling or notify", cfg.Signal), 2)
	}
	// The flows file is read before the database: a broken file is a usage error (exit 2)
	// whether or not the database is up.
	if _, err := flowfile.Load(cfg.FlowsPath); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	pool, err := openPgflow(ctx, c, int32(c.Int("max-connections"))+extraConn)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := pgflowwasm.NewClient(pool, cfg)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if addr := c.String("metrics-addr"); addr != "" {
		srv, err := listenHTTP(addr, metricsMux(client))
		if err != nil {
			return cli.Exit(fmt.Sprintf("--metrics-addr %s: %v", addr, err), 2)
		}
		defer srv.Close()
		log.Info("serving metrics and health", "addr", srv.Addr())
	}
	if c.String("ui-addr") != "" {
		stopUI, err := serveDashboardBeside(ctx, c, client, log)
		if err != nil {
			return err
		}
		defer stopUI()
	}
	// Loading compiles modules (a standard Go guest is megabytes of code), which leaves
	// garbage the collector would keep mapped for a while: hand it back before serving.
	err = client.Start(ctx)
	debug.FreeOSMemory()
	if err == nil {
		select {
		case <-ctx.Done():
		case <-client.Stopped():
		}
		err = client.Stop(context.Background()) // a prune batch in flight rolls back
	} else if ctx.Err() != nil {
		return nil // stopped before it served
	}
	var shape *pgflowtype.ShapeError
	var ferr flowfile.Errors
	var serr *sandbox.Error
	switch {
	case errors.Is(err, pgflowwasm.ErrRestart):
		return restartSelf(log)
	case errors.As(err, &shape), errors.As(err, &ferr), errors.As(err, &serr):
		// A problem of the flows file or its modules: a usage error, as for `compile`.
		return cli.Exit(err.Error(), 2)
	}
	return err
}

// metricsMux serves /metrics, /livez and /readyz.
func metricsMux(client *pgflowwasm.Client) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", client.MetricsHandler())
	mux.Handle("/", client.HealthHandler())
	return mux
}

// startCPUProfile writes a CPU profile of the process to path until the returned stop.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// maxInputFlag reads --max-input-size.
func maxInputFlag(c *cli.Context) (int, error) {
	maxInput, ok := bytesize.Parse(c.String("max-input-size"))
	if !ok || maxInput == 0 || maxInput > 1<<30 {
		return 0, cli.Exit(fmt.Sprintf("--max-input-size: %q is not a size from 1 byte to 1GiB: write e.g. 16MiB or a number of bytes", c.String("max-input-size")), 2)
	}
	return int(maxInput), nil
}

// watchInterval maps the flag's 0 ("off") to Serve's negative.
func watchInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// fetchLeases maps --fetch-leases to Config.FetchLeases: auto 0, off -1, or a count.
func fetchLeases(v string) (int, error) {
	switch v {
	case "auto", "":
		return 0, nil
	case "off":
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, cli.Exit(fmt.Sprintf("--fetch-leases %q: want auto, off or a number of leases (1 or more)", v), 2)
	}
	return n, nil
}

// foreignStaleAfter maps the flag's 0 ("never") to the worker's negative.
func foreignStaleAfter(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// flowsAndEngine loads --flows and opens the --engine; either failing is a usage error.
func flowsAndEngine(c *cli.Context) (*flowfile.File, sandbox.Engine, error) {
	file, err := flowfile.Load(c.String("flows"))
	if err != nil {
		return nil, nil, cli.Exit(err.Error(), 2)
	}
	maxInput, err := maxInputFlag(c)
	if err != nil {
		return nil, nil, err
	}
	engine, err := sandbox.New(c.String("engine"), sandbox.Config{CacheDir: c.String("cache-dir"), MaxInputBytes: maxInput})
	if err != nil {
		return nil, nil, cli.Exit(err.Error(), 2)
	}
	return file, engine, nil
}

// signalContext is cancelled by the first SIGINT/SIGTERM; a second one exits at once.
func signalContext(log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-ch
		log.Info("signal received: draining; send it again to exit at once", "signal", s.String())
		cancel()
		s = <-ch
		log.Warn("second signal: exiting now; tasks still running will be requeued by the stalled-task sweep", "signal", s.String())
		os.Exit(1)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// restartSelf replaces the process with a fresh copy of itself: the only way to reclaim
// handler calls the sandbox's watchdog had to abandon.
func restartSelf(log *slog.Logger) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	log.Warn("restarting the worker process", "exe", exe)
	return syscall.Exec(exe, os.Args, os.Environ())
}

// compileFlows runs compile with --update-options; a changed shape is a usage error (exit 2).
func compileFlows(ctx context.Context, c *cli.Context, pool *pgxpool.Pool, file *flowfile.File) ([]compile.FlowReport, error) {
	reports, err := compile.Compile(ctx, pool, file, compile.Options{UpdateOptions: c.Bool("update-options"), DryRun: c.Bool("dry-run"),
		NotifyInserts: true})
	var shape *pgflowtype.ShapeError
	switch {
	case errors.As(err, &shape):
		return nil, cli.Exit(err.Error(), 2)
	case err != nil:
		return nil, fmt.Errorf("compiling %s: %w", file.Path, err)
	}
	return reports, nil
}

func validateCommand() *cli.Command {
	return withConfigFile(&cli.Command{
		Name:  "validate",
		Usage: "check flows.yaml and every module it names, without a database",
		Description: "Reports every problem with its file and line: unknown keys, bad slugs, missing\n" +
			"dependencies, cycles, options out of range, missing modules, and modules the sandbox\n" +
			"rejects (unknown imports, missing exports, memory above the step's limit...).",
		Flags: append([]cli.Flag{flowsFlag(),
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "list every step with its module's sha256 and how the engine compiled it"}},
			engineFlags()...),
		Action: func(c *cli.Context) error {
			file, engine, err := flowsAndEngine(c)
			if err != nil {
				return err
			}
			defer engine.Close(context.Background())
			// Every module is loaded, so every rejected one is reported in one go.
			steps, rejected, external := 0, 0, 0
			for _, fl := range file.Flows {
				for _, s := range fl.Steps {
					steps++
					if s.External { // another worker serves it: no module to check
						external++
						if c.Bool("verbose") {
							fmt.Fprintf(c.App.Writer, "%s/%s\texternal: served by another worker\n", fl.Slug, s.Slug)
						}
						continue
					}
					m, err := step.Load(c.Context, engine, file, fl, s, nil, slog.New(slog.DiscardHandler))
					if err != nil {
						rejected++
						fmt.Fprintf(c.App.ErrWriter, "%s:%d: flow %q step %q: %v\n", file.Path, s.ModuleLine, fl.Slug, s.Slug, err)
						continue
					}
					if c.Bool("verbose") {
						info := m.Info()
						fmt.Fprintf(c.App.Writer, "%s/%s\t%s\tsha256 %s\t%s\n", fl.Slug, s.Slug, s.Module, info.SHA256[:12], info.Compilation)
					}
					_ = m.Close(c.Context)
				}
			}
			if rejected > 0 {
				return cli.Exit(fmt.Sprintf("%s: %d of %d steps have a module %s refuses (above)", file.Path, rejected, steps, engine.Name()), 2)
			}
			served := ""
			if external > 0 {
				served = fmt.Sprintf("; %d served by another worker (external)", external)
			}
			fmt.Fprintf(c.App.Writer, "%s: ok (%d flows, %d steps, every module accepted by %s%s)\n", file.Path, len(file.Flows), steps, engine.Name(), served)
			return nil
		},
	})
}

func compileCommand() *cli.Command {
	return withConfigFile(&cli.Command{
		Name:  "compile",
		Usage: "create the flows of flows.yaml in pgflow (create_flow, add_step); a no-op when they exist",
		Description: "pgflow flows are immutable: a flow whose steps, dependencies, step types or conditions\n" +
			"differ from the database is refused (give it a new slug, or, while developing, remove the\n" +
			"old one with `pgflow-wasm flow drop SLUG`). Differing options are reported, and written\n" +
			"only with --update-options. --dry-run shows what would change and changes nothing.\n" +
			"It also turns on insert notifications for the flows' queues, which takes the queue tables'\n" +
			"owner: compile as the owner, and a worker login that owns nothing listens (--signal notify)\n" +
			"instead of polling.",
		Flags: []cli.Flag{flowsFlag(), dbFlag(),
			altsrc.NewBoolFlag(&cli.BoolFlag{Name: "update-options", EnvVars: env("update-options"),
				Usage: "write changed flow and step options (attempts, delays, timeouts) to the database"}),
			&cli.BoolFlag{Name: "dry-run", Usage: "show what would change; write nothing"}},
		Action: func(c *cli.Context) error {
			file, err := flowfile.Load(c.String("flows"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			pool, err := openPgflow(c.Context, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			reports, err := compileFlows(c.Context, c, pool, file)
			if err != nil {
				return err
			}
			for _, r := range reports {
				fmt.Fprintf(c.App.Writer, "%s: %s\n", r.Slug, r.Action)
				if len(r.External) > 0 {
					fmt.Fprintf(c.App.Writer, "  served by another worker: %s (pgflow-wasm serves the rest)\n", strings.Join(r.External, ", "))
				}
				for _, d := range r.Options {
					fmt.Fprintf(c.App.Writer, "  %s\n", d)
				}
				if r.NotifyErr != nil {
					fmt.Fprintf(c.App.Writer, "  its queue does not notify on inserts (workers under --signal notify poll it unless they own it): %v\n", r.NotifyErr)
				}
			}
			if c.Bool("dry-run") {
				fmt.Fprintln(c.App.Writer, "(dry run: nothing was written)")
			}
			return nil
		},
	})
}

// serveDashboardBeside serves the dashboard on --ui-addr beside the worker, following the
// flows and modules it serves as it reloads. It gets its own small pool: its page queries
// never wait behind tasks.
func serveDashboardBeside(ctx context.Context, c *cli.Context, client *pgflowwasm.Client, log *slog.Logger) (func(), error) {
	uiPool, err := openPool(ctx, c, 4)
	if err != nil {
		return nil, err
	}
	ui, err := dashboardConfig(c, log)
	if err != nil {
		uiPool.Close()
		return nil, err
	}
	ui.WorkerStaleAfter = c.Duration("worker-stale-after")
	ui.Flows = client.Flows
	ui.Modules = client.ModuleInfo
	stop, err := serveDashboard(ctx, c, uiPool, ui, log)
	if err != nil {
		uiPool.Close()
		return nil, err
	}
	return func() { stop(); uiPool.Close() }, nil
}

// httpServer is a small HTTP server of the command's own (metrics and health).
type httpServer struct {
	srv *http.Server
	ln  net.Listener
}

// listenHTTP binds addr and serves h until Close.
func listenHTTP(addr string, h http.Handler) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &httpServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the bound address.
func (s *httpServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server.
func (s *httpServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}
