package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
	"golang.org/x/sys/unix"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// env names the environment variable of a flag: --drain-timeout is PGFLOW_WASM_DRAIN_TIMEOUT.
func env(flag string) []string {
	return []string{"PGFLOW_WASM_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// configFlag is --config: a YAML file whose keys are flag names (e.g. `concurrency: 20`).
// Precedence: flags, then environment variables, then the config file, then defaults.
func configFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "config",
		Usage:   "YAML file of settings keyed by flag name (flags and environment variables override it)",
		EnvVars: env("config"),
	}
}

// withConfigFile makes a command read --config before its action; its other flags must be
// altsrc flags to be settable from the file.
func withConfigFile(c *cli.Command) *cli.Command {
	c.Flags = append(c.Flags, configFlag())
	yaml := altsrc.NewYamlSourceFromFlagFunc("config")
	c.Before = altsrc.InitInputSourceWithContext(c.Flags, func(ctx *cli.Context) (altsrc.InputSourceContext, error) {
		src, err := yaml(ctx)
		if err != nil {
			return nil, err
		}
		return numbersAsText{src}, nil
	})
	return c
}

// numbersAsText lets a config file give a number where a flag takes text that may be one
// (`fetch-leases: 2`, not only `fetch-leases: "2"`): YAML reads 2 as an integer.
type numbersAsText struct{ altsrc.InputSourceContext }

func (s numbersAsText) String(name string) (string, error) {
	v, err := s.InputSourceContext.String(name)
	if err != nil {
		if n, nerr := s.InputSourceContext.Int(name); nerr == nil {
			return strconv.Itoa(n), nil
		}
	}
	return v, err
}

func flowsFlag() cli.Flag {
	return altsrc.NewStringFlag(&cli.StringFlag{
		Name:    "flows",
		Value:   "flows.yaml",
		Usage:   "the flows file (module paths in it are relative to its folder), or a folder of @pgflow/dsl flow files or one such file, served without one",
		EnvVars: env("flows"),
	})
}

func dbFlag() cli.Flag { return altsrc.NewStringFlag(databaseURLFlag()) }

// openPool connects to the database of --database-url and checks it answers, so a dead
// URL fails here with the host and the reason instead of deep inside a command.
func openPool(ctx context.Context, c *cli.Context, maxConns int32) (*pgxpool.Pool, error) {
	url := c.String("database-url")
	if url == "" {
		return nil, cli.Exit("no database: pass --database-url URL or set DATABASE_URL (e.g. postgres://user:pass@localhost:5432/db)", 2)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("--database-url is not a valid PostgreSQL URL: %v", err), 2)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		cc := cfg.ConnConfig
		return nil, schema.ExplainConnectError(cc.Host, cc.Port, cc.User, cc.Database, err)
	}
	return pool, nil
}

// openPgflow is openPool for commands that need pgflow's schema: a database without it gets
// the command that installs it, not a "relation does not exist" from deep inside.
func openPgflow(ctx context.Context, c *cli.Context, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, c, maxConns)
	if err != nil {
		return nil, err
	}
	var installed bool
	if err := pool.QueryRow(ctx, `select to_regclass('pgflow.flows') is not null and to_regclass('pgflow.runs') is not null`).Scan(&installed); err != nil {
		pool.Close()
		return nil, err
	}
	if !installed {
		pool.Close()
		return nil, cli.Exit("this database has no pgflow schema: install it with `pgflow-wasm db install` (same --database-url)", 1)
	}
	return pool, nil
}

// logFlags are --log-format and --log-level.
func logFlags() []cli.Flag {
	return []cli.Flag{
		altsrc.NewStringFlag(&cli.StringFlag{Name: "log-format", Value: "auto", EnvVars: env("log-format"),
			Usage: "text, json, or auto (text on a terminal, JSON otherwise)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("log-level"),
			Usage: "debug, info, warn or error"}),
	}
}

func newLogger(c *cli.Context, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, cli.Exit(fmt.Sprintf("--log-level %q: use debug, info, warn or error", c.String("log-level")), 2)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}
	switch c.String("log-format") {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "auto", "":
		if isTerminal(w) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, cli.Exit(fmt.Sprintf("--log-format %q: use text, json or auto", c.String("log-format")), 2)
}

// durationsAsText writes durations as "1.5s" in every format: slog's JSON handler would
// write bare nanoseconds, which people misread and log tools cannot tell from counts.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// isTerminal tells an interactive terminal from a file, a pipe or /dev/null (which is a
// character device too: only a terminal answers the terminal-attributes call).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// readInput reads a JSON argument: inline text, @file, or - for stdin.
func readInput(arg string) ([]byte, error) {
	switch {
	case arg == "-":
		return io.ReadAll(os.Stdin)
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("input file %s not found", arg[1:])
		}
		return b, err
	}
	return []byte(arg), nil
}
