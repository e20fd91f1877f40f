package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/bench"
	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Command pgflow-wasm-bench measures pgflow-wasm from outside, as a user runs it: it starts
// `pgflow-wasm serve` (the binary beside it, or --binary) against databases of its own,
// beside the protocol floor (its own `floor` subcommand) and pgflow's TypeScript loop. It is
// a command of its own so that nothing of the benchmark is in the production binary.
func main() {
	app := &cli.App{
		Name:  "pgflow-wasm-bench",
		Usage: "measure throughput, latency and cost per task against the protocol floor and pgflow's TypeScript loop",
		Description: "Sets up its own database (a private cluster in .pgdata-bench, or --database-url), then\n" +
			"measures, in one run: the naive floor (read, start_tasks, one complete_task transaction per\n" +
			"task, no handler), pgflow's TypeScript flow loop on @pgflow/core (Node), and pgflow-wasm with\n" +
			"the example modules of every language on wazero and with C on wasmtime, each under\n" +
			"--signal polling and notify; on three shapes (one-step runs, a map step, a chain), with fsync\n" +
			"on and off. Prints tables and writes them (Markdown and JSON) to --out.\n\n" +
			"Examples:\n   pgflow-wasm-bench                        # everything, ~15 minutes\n" +
			"   pgflow-wasm-bench --quick                # small counts, a few minutes\n" +
			"   pgflow-wasm-bench --only 'floor,reference,wazero/c/*' --fsync on --shapes one_step\n" +
			"   pgflow-wasm-bench --migrations ../shared/pgflow/0.14.1/migrations   # on pgflow 0.14.1\n" +
			"   pgflow-wasm-bench --extensions ../shared/pgmq/1.5.1 --layers ours,real   # our pgmq layer and the real pgmq side by side",
		Flags: []cli.Flag{
			databaseURLFlag(),
			&cli.StringFlag{Name: "binary", Usage: "the pgflow-wasm `BINARY` whose serve is measured (default: pgflow-wasm beside this command)"},
			&cli.StringFlag{Name: "migrations", EnvVars: []string{schema.MigrationsDirEnv},
				Usage: "pgflow's migrations folder the benchmark databases are built from (default: the pinned @pgflow/core 0.8.1 from npm)"},
			&cli.StringFlag{Name: "extensions", Usage: "copy the extension files (*.control, *.sql) of `DIR` (a real pgmq's, e.g. ../shared/pgmq/1.5.1) into the\n" +
				"\tprivate cluster's extension folder (its cluster is then .pgdata-bench-ext), so --layers can name real"},
			&cli.StringFlag{Name: "layers", Usage: "the pgmq every contender runs on, each in turn: ours (pgflow-wasm's layer), real (the server's pgmq extension)",
				DefaultText: "ours; ours,real with --extensions"},
			&cli.BoolFlag{Name: "quick", Usage: "a tenth of the default counts and no idle measurement"},
			&cli.StringFlag{Name: "only", Usage: "comma-separated contender names or patterns (floor, reference, wazero/c/notify, wazero/*/polling...)"},
			&cli.StringFlag{Name: "shapes", Value: "one_step,map,chain", Usage: "which shapes to run (and workers: N worker processes on one database, --worker-counts)"},
			&cli.StringFlag{Name: "worker-counts", Value: "1,2,4,8,16", Usage: "the workers shape: how many worker processes, each count in turn"},
			&cli.StringFlag{Name: "fsync", Value: "on,off", Usage: "durability settings to measure under (a local cluster only)"},
			&cli.IntFlag{Name: "runs", Usage: "one-step runs", DefaultText: "5000, 500 with --quick"},
			&cli.IntFlag{Name: "map-size", Usage: "elements of the map run", DefaultText: "2000, 200 with --quick"},
			&cli.IntFlag{Name: "chain-runs", Usage: "runs of the 10-step chain", DefaultText: "500, 50 with --quick"},
			&cli.IntFlag{Name: "chain-in-flight", Usage: "chain runs kept going at once (1: one user waiting on one run at a time)", DefaultText: "10"},
			&cli.IntFlag{Name: "floor-loops", Usage: "parallel loops of the floor", DefaultText: "4"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "measure every shape's contenders this many times in turn and add each one's median, and the median of each round's ratio to the floor (steadier on a shared machine)"},
			&cli.BoolFlag{Name: "statements", Usage: "list each measurement's costliest statements from pg_stat_statements (the private cluster preloads it)"},
			&cli.IntFlag{Name: "idle-seconds", Value: 60, Usage: "watch an idle worker this long (0 skips it)"},
			&cli.StringSliceFlag{Name: "worker-arg", Usage: "an extra `FLAG` for every pgflow-wasm serve the benchmark starts (repeatable), e.g. --worker-arg=--concurrency=16"},
			&cli.StringSliceFlag{Name: "variant", Usage: "an extra pgflow-wasm contender, `NAME:TOKENS` (lang=, engine=, signal=, binary=PATH, serve flags), e.g. 'unbatched:--completion-batch=1' (repeatable)"},
			&cli.StringFlag{Name: "out", Value: "bench-results", Usage: "folder for the report files"},
		},
		Commands:        []*cli.Command{benchFloorCommand()},
		HideHelpCommand: true,
		Action:          runBench,
	}
	if err := app.Run(os.Args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := ec.Error(); msg != "" {
				fmt.Fprintln(os.Stderr, "pgflow-wasm-bench:", msg)
			}
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "pgflow-wasm-bench:", err)
		os.Exit(1)
	}
}

func runBench(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var counts []int
	for _, s := range splitList(c.String("worker-counts")) {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			return cli.Exit(fmt.Sprintf("--worker-counts: %q is not a positive number", s), 2)
		}
		counts = append(counts, n)
	}
	extFiles, err := localpg.ExtensionFiles(c.String("extensions"))
	if err != nil {
		return cli.Exit("--extensions: "+err.Error(), 2)
	}
	if extFiles != nil && c.String("database-url") != "" {
		return cli.Exit("--extensions puts files into the private cluster: it cannot be used with --database-url", 2)
	}
	cfg := bench.Config{
		DatabaseURL: c.String("database-url"),
		Binary:      c.String("binary"),
		CacheDir:    sandbox.DefaultCacheDir(),
		OneStepRuns: c.Int("runs"), MapSize: c.Int("map-size"), ChainRuns: c.Int("chain-runs"), ChainInFlight: c.Int("chain-in-flight"),
		FloorLoops: c.Int("floor-loops"), IdleSeconds: c.Int("idle-seconds"), Rounds: c.Int("rounds"),
		Fsync: splitList(c.String("fsync")), Shapes: splitList(c.String("shapes")),
		WorkerArgs:     c.StringSlice("worker-arg"),
		WorkerCounts:   counts,
		Statements:     c.Bool("statements"),
		Migrations:     c.String("migrations"),
		Layers:         splitList(c.String("layers")),
		ExtensionFiles: extFiles,
	}
	if c.Bool("quick") {
		cfg.OneStepRuns = orDefault(cfg.OneStepRuns, 500)
		cfg.MapSize = orDefault(cfg.MapSize, 200)
		cfg.ChainRuns = orDefault(cfg.ChainRuns, 50)
		cfg.LatencyRuns = 50
		cfg.IdleSeconds = 0
	}
	if only := c.String("only"); only != "" {
		for _, ct := range bench.DefaultContenders() {
			for _, pat := range splitList(only) {
				if ok, _ := path.Match(pat, ct.Name); ok {
					cfg.Contenders = append(cfg.Contenders, ct)
					break
				}
			}
		}
		if len(cfg.Contenders) == 0 {
			var names []string
			for _, ct := range bench.DefaultContenders() {
				names = append(names, ct.Name)
			}
			return cli.Exit(fmt.Sprintf("--only %q matches no contender; there are: %s", only, strings.Join(names, ", ")), 2)
		}
	}
	for _, spec := range c.StringSlice("variant") {
		v, err := bench.ParseVariant(spec)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		if len(cfg.Contenders) == 0 && c.String("only") == "" {
			cfg.Contenders = bench.DefaultContenders()
		}
		cfg.Contenders = append(cfg.Contenders, v)
	}
	rep, err := bench.Run(ctx, cfg)
	if rep == nil {
		return err
	}
	rep.WriteText(os.Stdout)
	if werr := writeReport(c.String("out"), rep); werr != nil && err == nil {
		err = werr
	}
	return err
}

func writeReport(dir string, rep *bench.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, "bench-"+rep.Started.Format("20060102-150405"))
	md, err := os.Create(base + ".md")
	if err != nil {
		return err
	}
	rep.WriteText(md)
	if err := md.Close(); err != nil {
		return err
	}
	js, err := os.Create(base + ".json")
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(js); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "report written to %s.md and %s.json\n", base, base)
	return js.Close()
}

func benchFloorCommand() *cli.Command {
	return &cli.Command{
		Name:  "floor",
		Usage: "the naive protocol loop the benchmark compares against (no handler; the benchmark runs it)",
		Flags: []cli.Flag{databaseURLFlag(),
			&cli.StringFlag{Name: "flow", Required: true, Usage: "the flow whose tasks to run"},
			&cli.IntFlag{Name: "loops", Value: 4, Usage: "loops reading and completing tasks in parallel"},
			&cli.IntFlag{Name: "batch-size", Value: 10, Usage: "messages read per poll"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			pool, err := openPool(ctx, c, int32(c.Int("loops"))+1)
			if err != nil {
				return err
			}
			defer pool.Close()
			fmt.Println("ready")
			began := time.Now()
			n, err := bench.Floor(ctx, pool, bench.FloorConfig{Flow: c.String("flow"), Loops: c.Int("loops"), BatchSize: c.Int("batch-size")})
			fmt.Printf("done %d tasks in %s\n", n, time.Since(began).Round(time.Millisecond))
			return err
		},
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

func databaseURLFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "database-url",
		Usage:   "PostgreSQL connection string of a server the benchmark may create databases on (default: a private cluster in .pgdata-bench)",
		EnvVars: []string{"PGFLOW_WASM_BENCH_DATABASE_URL"},
	}
}

func openPool(ctx context.Context, c *cli.Context, maxConns int32) (*pgxpool.Pool, error) {
	url := c.String("database-url")
	if url == "" {
		return nil, cli.Exit("no database: pass --database-url URL", 2)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("--database-url is not a valid PostgreSQL URL: %v", err), 2)
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}
