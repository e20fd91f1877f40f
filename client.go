// Package pgflowwasm runs pgflow step handlers compiled to WebAssembly inside a Go program:
// the worker of `pgflow-wasm serve`, as a library.
//
// A Client serves the flows of a flows file (or of a file built in Go): it compiles them
// into pgflow, fetches their tasks, runs each in a fresh sandbox with the step's limits and
// capabilities, and writes the outcomes back; a task of a worker that died is handed back to
// pgflow. The database must have pgflow's schema (`pgflow-wasm db install`, or a database
// pgflow's own installer migrated).
//
//	client, err := pgflowwasm.NewClient(pool, pgflowwasm.Config{FlowsPath: "flows.yaml"})
//	if err := client.Start(ctx); err != nil { ... }
//	runID, err := client.StartRun(ctx, "word_totals", []string{"a b", "c"})
//	run, err := client.WaitRun(ctx, runID)
//	dash, err := client.DashboardHandler(pgflowwasm.DashboardOptions{BasePath: "/ops"})
//	mux.Handle("/ops/", dash) // the web dashboard, in your own http.Server
//	client.Stop(ctx)
//
// The command-line tool is a thin user of this package; the packages flowfile (flows files)
// and sandbox (the WebAssembly sandbox) are its other stable interfaces, and everything
// under internal/ may change.
package pgflowwasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// ErrRestart is returned by Wait when the client stopped because handler calls the sandbox
// had to abandon piled up and Config.ExitOnRestart asks the process to start afresh.
var ErrRestart = worker.ErrRestart

// Client serves flows. Create it with NewClient, then Start and, at the end, Stop.
type Client struct {
	pool    *pgxpool.Pool
	cfg     Config
	engine  sandbox.Engine
	metrics *telemetry.Metrics
	health  *telemetry.Health
	log     *slog.Logger

	mu      sync.Mutex
	current *worker.Worker // the worker serving now (a reload replaces it)
	file    *flowfile.File // the flows it serves
	cancel  context.CancelFunc
	done    chan struct{} // closed when serving ended
	err     error         // why serving ended, once done is closed

	dashboards []*dashboard.Dashboard // DashboardHandler's, closed by Stop
	stopped    bool                   // Stop ran: no dashboard opens any more

	readsMu sync.Mutex   // held while the read model opens: a query, so not under mu
	reads   *store.Store // the read model, opened at first use (runs.go)
}

// NewClient checks the configuration and opens the sandbox engine. It does not touch the
// database: Start does.
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("pgflowwasm: NewClient needs a database pool")
	}
	if (cfg.FlowsPath == "") == (cfg.Flows == nil) {
		return nil, errors.New("pgflowwasm: give Config.FlowsPath (a flows.yaml) or Config.Flows (a file built in Go), one of the two")
	}
	switch cfg.Signal {
	case "", pgflowtype.SignalPolling, pgflowtype.SignalNotify:
	default:
		return nil, fmt.Errorf("pgflowwasm: Config.Signal %q: use pgflowtype.SignalPolling or pgflowtype.SignalNotify", cfg.Signal)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	engineName := cfg.Engine
	if engineName == "" {
		engineName = sandbox.EngineWazero
	}
	engine, err := sandbox.New(engineName, cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	c := &Client{pool: pool, cfg: cfg, engine: engine, health: &telemetry.Health{}, log: cfg.Logger}
	c.metrics = telemetry.NewMetrics(cfg.MetricsRegisterer, engine.Abandoned)
	return c, nil
}

// Start compiles the flows into pgflow (a flow whose shape differs from the database's is
// refused), starts serving them and returns once the worker takes tasks. Serving goes on in
// the background until Stop, whatever happens to ctx afterwards.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.done != nil {
		c.mu.Unlock()
		return errors.New("pgflowwasm: the client was started already")
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel, c.done = cancel, make(chan struct{})
	c.mu.Unlock()

	serving := make(chan struct{})
	var once sync.Once
	first := true // the first compile names every flow, reloads only what changed
	cfg := worker.ServeConfig{
		FlowsPath:     c.cfg.FlowsPath,
		Flows:         c.cfg.Flows,
		Worker:        c.workerConfig(),
		WatchInterval: c.cfg.WatchInterval,
		Reload:        c.cfg.Reload,
		Compile: func(ctx context.Context, file *flowfile.File) error {
			reports, err := compile.Compile(ctx, c.pool, file, compile.Options{UpdateOptions: !c.cfg.KeepDatabaseOptions})
			if err != nil {
				return err
			}
			for _, r := range reports {
				if first || r.Action != compile.Unchanged {
					c.log.Info("flow "+string(r.Action), "flow", r.Slug)
				}
				for _, d := range r.Options {
					c.log.Warn("flow option differs from the database", "flow", r.Slug, "difference", d)
				}
			}
			first = false
			return nil
		},
		OnServe: func(w *worker.Worker, file *flowfile.File) {
			c.mu.Lock()
			c.current, c.file = w, file
			c.mu.Unlock()
			once.Do(func() { close(serving) })
		},
	}
	go func() {
		err := c.serve(runCtx, cfg)
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	}()
	select {
	case <-serving:
		return nil
	case <-c.done:
		return c.Wait()
	case <-ctx.Done():
		cancel()
		<-c.done
		return ctx.Err()
	}
}

// serve runs the worker; when abandoned calls make it stop, it serves again on a fresh
// engine, unless ExitOnRestart hands that to the process.
func (c *Client) serve(ctx context.Context, cfg worker.ServeConfig) error {
	// One worker process across restarts: an operator's drain holds.
	cfg.Worker.Process = cfg.Worker.WithDefaults().Process
	for {
		err := worker.Serve(ctx, cfg)
		if !errors.Is(err, worker.ErrRestart) || c.cfg.ExitOnRestart || ctx.Err() != nil {
			return err
		}
		c.log.Warn("restarting the worker on a fresh engine: handler calls the sandbox abandoned piled up")
		engine, nerr := sandbox.New(c.engine.Name(), c.cfg.Sandbox)
		if nerr != nil {
			return errors.Join(err, nerr)
		}
		old := c.engine
		c.mu.Lock()
		c.engine = engine
		c.mu.Unlock()
		cfg.Worker.Engine = engine
		go old.Close(context.Background()) // returns once the abandoned calls end
	}
}

// Stop closes the dashboards of DashboardHandler, stops taking tasks, lets running ones
// finish (up to Config.DrainTimeout, or until ctx ends), writes their outcomes, marks the
// worker stopped and closes the engine. It returns
// what ended serving, if that was an error.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	cancel, done, dashboards := c.cancel, c.done, c.dashboards
	c.dashboards, c.stopped = nil, true
	c.mu.Unlock()
	for _, d := range dashboards {
		d.Close()
	}
	var err error
	if done != nil {
		cancel()
		select {
		case <-done:
			err = c.Wait()
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	c.mu.Lock()
	engine := c.engine
	c.mu.Unlock()
	if cerr := engine.Close(context.WithoutCancel(ctx)); cerr != nil && !errors.Is(cerr, sandbox.ErrClosed) && err == nil {
		err = cerr
	}
	return err
}

// Stopped is closed when serving has ended (Stop, or an error: see Wait).
func (c *Client) Stopped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

// Wait waits until serving has ended and returns why: nil after Stop, ErrRestart (with
// Config.ExitOnRestart), or the error that stopped it.
func (c *Client) Wait() error {
	<-c.Stopped()
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(c.err, context.Canceled) {
		return nil
	}
	return c.err
}

// Flows is the flows file the client serves now (it changes with a reload); nil before
// Start.
func (c *Client) Flows() *flowfile.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.file
}

// ModuleInfo describes the module a served step runs, as loaded.
func (c *Client) ModuleInfo(flow, step string) (sandbox.Info, bool) {
	c.mu.Lock()
	w := c.current
	c.mu.Unlock()
	if w == nil {
		return sandbox.Info{}, false
	}
	return w.ModuleInfo(flow, step)
}

// WorkerIDs are the pgflow.workers ids the serving worker registered, by flow.
func (c *Client) WorkerIDs() map[string]string {
	c.mu.Lock()
	w := c.current
	c.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.WorkerIDs()
}

// Ready reports whether the client takes tasks and reaches its database, and if not, what it
// waits for (a sentence beginning "starting", "draining" or "database unreachable"). A reload
// keeps it ready: it follows the worker that serves, not the one draining.
func (c *Client) Ready() (bool, string) { return c.health.Ready() }

// HealthHandler answers /livez (the process runs) and /readyz (Ready), for probes.
func (c *Client) HealthHandler() http.Handler { return c.health.Handler() }

// MetricsHandler serves the client's Prometheus metrics, when it keeps its own registry
// (Config.MetricsRegisterer unset); with a registerer of yours, serve your registry instead.
func (c *Client) MetricsHandler() http.Handler {
	if c.metrics.Registry == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "metrics are registered in Config.MetricsRegisterer: serve that registry", http.StatusNotFound)
		})
	}
	return promhttp.HandlerFor(c.metrics.Registry, promhttp.HandlerOpts{})
}

// Engine is the sandbox engine the client runs handlers on.
func (c *Client) Engine() sandbox.Engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.engine
}

// waitRecheck is how often WaitRun reads a run that sends no events.
const waitRecheck = time.Second

// workerConfig maps the client's configuration to its worker's: the one place they meet.
func (c *Client) workerConfig() worker.Config {
	cfg := c.cfg
	return worker.Config{
		Pool: c.pool, Engine: c.engine, Log: c.log, Metrics: c.metrics, Health: c.health, Hooks: cfg.Hooks,
		Concurrency: cfg.Concurrency, BatchSize: cfg.BatchSize, Signal: cfg.Signal,
		MinPollInterval: cfg.MinPollInterval, MaxPollInterval: cfg.MaxPollInterval, NotifyFallback: cfg.NotifyFallback,
		HeartbeatInterval: cfg.HeartbeatInterval, WorkerStaleAfter: cfg.WorkerStaleAfter, LivenessGrace: cfg.LivenessGrace,
		RecoveryInterval: cfg.RecoveryInterval, StalledMargin: cfg.StalledMargin, ForeignStaleAfter: cfg.ForeignStaleAfter,
		DrainTimeout: cfg.DrainTimeout, AttemptHistory: cfg.AttemptHistory, PgflowCheckInterval: cfg.PgflowCheckInterval,
		CompletionBatch: cfg.CompletionBatch, CompletionWriters: cfg.CompletionWriters, FetchLeases: cfg.FetchLeases,
	}
}
