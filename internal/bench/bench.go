// Package bench measures task throughput, latency and cost per task of pgflow-wasm against
// the protocol's naive floor and pgflow's own TypeScript flow loop, on one database, in one
// run. Every contender is a separate process working a fresh database cloned from one
// template, so each starts from the same state; CPU and memory are read from /proc.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/procstat"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Config sets what to measure. Zero values take the defaults in brackets.
type Config struct {
	// DatabaseURL names a server to use; "" starts a private local cluster in
	// <repo>/.pgdata-bench. On an outside server fsync cannot be switched and the
	// database's CPU cannot be read: those columns say n/a.
	DatabaseURL string
	// ClusterDir is the private cluster's folder [<repo>/.pgdata-bench]. A cluster the
	// benchmark starts is stopped at its end; one that was running is left running.
	ClusterDir string
	Binary     string // the pgflow-wasm binary whose serve is measured [pgflow-wasm beside this executable]
	// FloorBinary runs the floor contender as `FloorBinary floor` [this executable, the
	// pgflow-wasm-bench command].
	FloorBinary string
	RepoRoot    string // [found from the working directory]
	CacheDir    string // compiled-module cache of the workers
	Migrations  string // pgflow's migrations [node_modules/@pgflow/core/dist/supabase/migrations]

	OneStepRuns     int   // shape a: one-step runs, started before the contender [5000]
	MapSize         int   // shape b: elements of the single map run [2000]
	ChainRuns       int   // shape c: runs of the chain [500]
	ChainLength     int   // [10]
	ChainInFlight   int   // chain runs kept in flight (closed loop) [10]
	LatencyRuns     int   // one-step runs timed one by one after shape a, in a closed loop [300]
	LatencyInFlight int   // [8]
	FloorLoops      int   // parallel loops of the floor [4]
	WorkerCounts    []int // the workers shape: how many worker processes [1, 2, 4, 8, 16]
	IdleSeconds     int   // how long the idle worker is watched; 0 skips it [60]
	// Rounds measures every shape's contenders this many times, in turn (floor, A, B, floor,
	// A, B, ...), so that a slow minute of a shared machine falls on every contender alike;
	// the report adds the median of each figure and of each round's ratio to the floor [1].
	Rounds int

	Fsync      []string    // ["on", "off"]; "asis" measures the server as it is configured
	Contenders []Contender // [DefaultContenders()]
	Shapes     []string    // ["one_step", "map", "chain"]; "workers" too on request
	WorkerArgs []string    // extra flags for `pgflow-wasm serve` (e.g. --concurrency 16)
	// ExtensionFiles go into the private cluster's extension folder (a real pgmq's *.control
	// and *.sql, so that Layers can name LayerReal). With them the private cluster is
	// <repo>/.pgdata-bench-ext, so the plain one's extension folder keeps our layer alone.
	ExtensionFiles map[string][]byte
	// Layers are the pgmq implementations every contender is measured on, each in its own
	// template: LayerOurs (pgflow-wasm's layer) and LayerReal (the server's pgmq extension)
	// [LayerOurs; LayerOurs and LayerReal with ExtensionFiles].
	Layers []string
	// Statements lists each measurement's costliest statements from pg_stat_statements
	// (track = all: the statements inside pgflow's functions too). The private cluster then
	// preloads the extension; an outside server must have it loaded.
	Statements bool

	Log io.Writer // progress lines [os.Stderr]
}

func (c *Config) defaults() error {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.OneStepRuns, 5000)
	def(&c.MapSize, 2000)
	def(&c.ChainRuns, 500)
	def(&c.ChainLength, 10)
	def(&c.ChainInFlight, 10)
	def(&c.LatencyRuns, 300)
	def(&c.LatencyInFlight, 8)
	def(&c.FloorLoops, 4)
	def(&c.Rounds, 1)
	if c.IdleSeconds < 0 {
		c.IdleSeconds = 0
	}
	if len(c.Fsync) == 0 {
		c.Fsync = []string{"on", "off"}
	}
	if len(c.Contenders) == 0 {
		c.Contenders = DefaultContenders()
	}
	if len(c.WorkerCounts) == 0 {
		c.WorkerCounts = []int{1, 2, 4, 8, 16}
	}
	if len(c.Shapes) == 0 {
		c.Shapes = []string{ShapeOneStep, ShapeMap, ShapeChain}
	}
	if len(c.Layers) == 0 {
		c.Layers = []string{LayerOurs}
		if len(c.ExtensionFiles) > 0 {
			c.Layers = append(c.Layers, LayerReal)
		}
	}
	for _, l := range c.Layers {
		if l != LayerOurs && l != LayerReal {
			return fmt.Errorf("unknown pgmq layer %q: use %s or %s", l, LayerOurs, LayerReal)
		}
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	if c.Binary == "" || c.FloorBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		if c.Binary == "" {
			c.Binary = filepath.Join(filepath.Dir(exe), "pgflow-wasm")
		}
		if c.FloorBinary == "" {
			c.FloorBinary = exe
		}
	}
	if c.RepoRoot == "" {
		root, err := localpg.RepoRoot(".")
		if err != nil {
			return err
		}
		c.RepoRoot = root
	}
	if c.Migrations == "" {
		c.Migrations = filepath.Join(c.RepoRoot, schema.DefaultMigrationsDir)
	}
	if c.ClusterDir == "" {
		c.ClusterDir = filepath.Join(c.RepoRoot, ".pgdata-bench")
		if len(c.ExtensionFiles) > 0 {
			c.ClusterDir += "-ext"
		}
	}
	return nil
}

// runner holds what one benchmark run shares.
type runner struct {
	cfg        Config
	tmp        string
	admin      *pgx.Conn // to the maintenance database: create/drop, fsync, checkpoints
	serverURL  func(db string) string
	postmaster int // 0 when the server is not local
	// cluster is the private cluster, when the benchmark uses one; started tells whether
	// this run started it (and so stops it at the end).
	cluster *localpg.Cluster
	started bool
	// templates are the template databases of each layer; layer is the one the measurement
	// under way clones.
	templates map[string]string
	layer     string
	id        string // in the names of this run's databases
	logf      func(format string, args ...any)
}

var runs atomic.Int64 // runs started by this process

// Run measures every contender on every shape under every fsync setting.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	// Databases are named after the process and the run: runs of one process (tests in
	// parallel) never share one.
	r := &runner{cfg: cfg, id: fmt.Sprintf("%d_%d", os.Getpid(), runs.Add(1))}
	r.logf = func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	var err error
	if r.tmp, err = os.MkdirTemp("", "pgflow-wasm-bench-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.tmp)
	defer r.releaseServer()
	if err := r.openServer(ctx); err != nil {
		return nil, err
	}
	defer r.admin.Close(context.Background())
	r.templates = map[string]string{}
	defer func() {
		for _, t := range r.templates {
			r.dropDatabase(context.Background(), t)
		}
	}()
	for _, layer := range cfg.Layers {
		if err := r.buildTemplate(ctx, layer); err != nil {
			return nil, fmt.Errorf("pgmq layer %s: %w", layer, err)
		}
	}

	rep := &Report{Started: time.Now(), Config: cfg, Server: r.serverInfo(ctx), Pgflow: "unknown"}
	if m, err := schema.LoadMigrations(cfg.Migrations); err == nil {
		rep.Pgflow = m.PgflowVersion
	}
	for _, fsync := range cfg.Fsync {
		if err := r.setFsync(ctx, fsync); err != nil {
			return nil, err
		}
		for _, shape := range cfg.Shapes {
			for round := 1; round <= cfg.Rounds; round++ {
				for _, layer := range cfg.Layers {
					r.layer = layer
					for _, c := range cfg.Contenders {
						if ctx.Err() != nil {
							return rep, ctx.Err()
						}
						if shape == ShapeWorkers {
							if c.Kind != KindWorker {
								continue
							}
							for _, n := range cfg.WorkerCounts {
								res := r.measureWorkers(ctx, c, fsync, n)
								res.Round, res.Layer = round, layer
								rep.Results = append(rep.Results, res)
								r.logf("%-6s fsync=%-3s %-26s %s", shape, fsync, res.name(cfg.Rounds), res.summary())
							}
							continue
						}
						res := r.measure(ctx, c, shape, fsync)
						res.Round, res.Layer = round, layer
						rep.Results = append(rep.Results, res)
						r.logf("%-6s fsync=%-3s %-26s %s", shape, fsync, res.name(cfg.Rounds), res.summary())
					}
				}
			}
		}
	}
	if cfg.IdleSeconds > 0 {
		r.layer = cfg.Layers[0]
		rep.Idle = r.measureIdle(ctx)
	}
	rep.Finished = time.Now()
	rep.fillRatios()
	return rep, nil
}

// releaseServer stops the private cluster if this run started it, and otherwise says that
// it is left running and how to stop it: a benchmark leaves no server behind unannounced.
func (r *runner) releaseServer() {
	switch {
	case r.cluster == nil:
	case r.started:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := r.cluster.Stop(ctx); err != nil {
			r.logf("stopping the benchmark cluster: %v; stop it with `pgflow-wasm localdb down --dir %s`", err, r.cluster.Dir)
			return
		}
		r.logf("stopped the benchmark cluster it started (%s; its data is kept)", r.cluster.Dir)
	default:
		r.logf("the benchmark cluster in %s was running before and is left running; stop it with `pgflow-wasm localdb down --dir %s`", r.cluster.Dir, r.cluster.Dir)
	}
}

// openServer connects to the outside server, or starts the private cluster.
func (r *runner) openServer(ctx context.Context) error {
	url := r.cfg.DatabaseURL
	if url == "" {
		settings := map[string]string{"shared_buffers": "256MB",
			// 16 workers of the workers shape hold up to 11 connections each.
			"max_connections": "300",
			// A commit's time, for where a chain's hop goes (hops.go).
			"track_commit_timestamp": "on"}
		if r.cfg.Statements {
			settings["shared_preload_libraries"] = "'pg_stat_statements'"
			settings["pg_stat_statements.track"] = "all"
			settings["pg_stat_statements.max"] = "10000"
		}
		c, err := localpg.New(localpg.Config{Dir: r.cfg.ClusterDir, Settings: settings, ExtensionFiles: r.cfg.ExtensionFiles})
		if err != nil {
			return err
		}
		r.cluster, r.started = c, !c.Running(ctx)
		if r.started {
			r.logf("starting the benchmark cluster in %s (stopped again at the end)", c.Dir)
		} else {
			r.logf("using the benchmark cluster already running in %s", c.Dir)
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		url = c.URL("postgres")
		if pid, err := procstat.PostmasterPID(c.DataDir()); err == nil {
			r.postmaster = pid
		}
	}
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	r.admin, err = pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return schema.ExplainConnectError(cc.Host, cc.Port, cc.User, cc.Database, err)
	}
	base := cc.Copy()
	r.serverURL = func(db string) string {
		return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", base.User, base.Host, base.Port, db) + passwordParam(base.Password)
	}
	return nil
}

func passwordParam(pw string) string {
	if pw == "" {
		return ""
	}
	return "&password=" + pw
}

// The pgmq layers a benchmark measures on.
const (
	LayerOurs = "ours" // pgflow-wasm's pgmq-compatible layer
	LayerReal = "real" // the pgmq extension the server offers (Config.ExtensionFiles)
)

// buildTemplate installs pgmq (the layer asked for), realtime.send and pgflow once into a
// template database of that layer.
func (r *runner) buildTemplate(ctx context.Context, layer string) error {
	name := "pgflow_bench_template_" + layer + "_" + r.id
	if err := r.createDatabase(ctx, name, ""); err != nil {
		return err
	}
	r.templates[layer] = name
	conn, err := pgx.Connect(ctx, r.serverURL(name))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	opts := schema.Options{MigrationsDir: r.cfg.Migrations}
	if layer == LayerOurs {
		// Auto mode would take a real pgmq the server offers; a plain schema never does.
		var offered bool
		if err := conn.QueryRow(ctx, `select exists (select from pg_available_extensions where name = 'pgmq'
			and default_version not like '%+pgflow-wasm%')`).Scan(&offered); err != nil {
			return err
		}
		if offered {
			opts.Layer = schema.LayerSchema
		}
	}
	rep, err := schema.Install(ctx, conn, opts)
	if err != nil {
		return err
	}
	if got := rep.Pgmq.Kind == schema.PgmqReal; got != (layer == LayerReal) {
		hint := ""
		if layer == LayerReal {
			hint = ": the server offers no pgmq extension (give its files with --extensions DIR)"
		}
		return fmt.Errorf("installed %s, not the %s layer asked for%s", rep.Pgmq, layer, hint)
	}
	r.logf("template of the %s layer: %s", layer, rep.Pgmq)
	return nil
}

func (r *runner) createDatabase(ctx context.Context, name, template string) error {
	q := "create database " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		q += " template " + pgx.Identifier{template}.Sanitize()
	}
	_, err := r.admin.Exec(ctx, q)
	return err
}

func (r *runner) dropDatabase(ctx context.Context, name string) {
	_, _ = r.admin.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)")
}

// setFsync switches durability for the next measurements: "on" is production (fsync,
// synchronous_commit, full_page_writes), "off" is fsync off. It needs a superuser.
func (r *runner) setFsync(ctx context.Context, mode string) error {
	switch mode {
	case "asis":
		return nil
	case "on", "off":
	default:
		return fmt.Errorf("fsync %q: use on, off or asis", mode)
	}
	on := mode == "on"
	val := map[bool]string{true: "on", false: "off"}[on]
	for _, q := range []string{
		"alter system set fsync = " + val,
		"alter system set full_page_writes = " + val,
		"alter system set synchronous_commit = on",
		"select pg_reload_conf()",
	} {
		if _, err := r.admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("switching fsync %s (needs a superuser on a server you may reconfigure): %w", mode, err)
		}
	}
	// Reloads are asynchronous: wait until this session sees the new value.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got string
		if err := r.admin.QueryRow(ctx, "show fsync").Scan(&got); err != nil {
			return err
		}
		if got == val {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fsync still %s 10 s after the reload", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newDatabase clones the template for one measurement and returns its URL and a pool.
func (r *runner) newDatabase(ctx context.Context, name string) (string, *pgxpool.Pool, error) {
	r.dropDatabase(ctx, name)
	if err := r.createDatabase(ctx, name, r.templates[r.layer]); err != nil {
		return "", nil, err
	}
	url := r.serverURL(name)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return "", nil, err
	}
	cfg.MaxConns = 16
	cfg.ConnConfig.RuntimeParams["application_name"] = harnessApp
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	return url, pool, err
}

// compiledDatabase clones the template into a database named prefix_<pid>, compiles the
// flows into it, and returns its URL, a pool and a function that drops it.
func (r *runner) compiledDatabase(ctx context.Context, prefix string, file *flowfile.File) (string, *pgxpool.Pool, func(), error) {
	name := prefix + "_" + r.id
	url, pool, err := r.newDatabase(ctx, name)
	if err != nil {
		return "", nil, nil, err
	}
	drop := func() {
		pool.Close()
		r.dropDatabase(context.Background(), name)
	}
	if _, err := compile.Compile(ctx, pool, file, compile.Options{}); err != nil {
		drop()
		return "", nil, nil, err
	}
	return url, pool, drop, nil
}

// databaseName is the database a URL names.
func databaseName(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return ""
	}
	return cfg.Database
}

func (r *runner) serverInfo(ctx context.Context) string {
	var v string
	_ = r.admin.QueryRow(ctx, "select version()").Scan(&v)
	return v
}
