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
	"github.com/pgflow-wasm/pgflow-wasm/internal/retention"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
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

	// services is the client's lifecycle (package service): the supervisor, which serves
	// the flows with one worker at a time through reloads and engine restarts, then the
	// pruning of old runs when Config.PruneOlderThan asks for it.
	services   service.Group
	supervisor *worker.Supervisor

	mu      sync.Mutex
	started bool           // Start ran
	current *worker.Worker // the worker serving now (a reload replaces it)
	file    *flowfile.File // the flows it serves

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
	cfg = cfg.WithDefaults()
	engine, err := sandbox.New(cfg.Engine, cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	c := &Client{pool: pool, cfg: cfg, engine: engine, health: &telemetry.Health{}, log: cfg.Logger}
	c.metrics = telemetry.NewMetrics(cfg.MetricsRegisterer, engine.Abandoned)
	c.supervisor = worker.NewSupervisor(c.serveConfig())
	return c, nil
}

// Start compiles the flows into pgflow (a flow whose shape differs from the database's is
// refused), starts serving them and returns once the worker takes tasks. Serving goes on in
// the background until Stop, whatever happens to ctx afterwards.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("pgflowwasm: the client was started already")
	}
	c.started = true
	c.mu.Unlock()
	var pruning service.Service
	if c.cfg.PruneOlderThan > 0 {
		pruning = retention.Periodic(c.pool, retention.Options{OlderThan: c.cfg.PruneOlderThan}, c.cfg.PruneInterval, c.log)
	}
	return c.services.Start(ctx, c.supervisor, pruning)
}

// serveConfig is what the supervisor serves with: the client's configuration, its compile
// step and its engine restarts.
func (c *Client) serveConfig() worker.ServeConfig {
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
		},
	}
	if !c.cfg.ExitOnRestart {
		cfg.Restart = c.restartEngine
	}
	return cfg
}

// restartEngine replaces the engine after abandoned calls piled up; the old one closes in
// the background, once its abandoned calls end.
func (c *Client) restartEngine() (sandbox.Engine, error) {
	engine, err := sandbox.New(c.cfg.Engine, c.cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	old := c.engine
	c.engine = engine
	c.mu.Unlock()
	go old.Close(context.Background())
	return engine, nil
}

// Stop closes the dashboards of DashboardHandler, stops taking tasks, lets running ones
// finish (up to Config.DrainTimeout, or until ctx ends), writes their outcomes, marks the
// worker stopped and closes the engine. It returns what ended serving, if that was an error.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	dashboards, started := c.dashboards, c.started
	c.dashboards, c.stopped = nil, true
	c.mu.Unlock()
	for _, d := range dashboards {
		d.Close()
	}
	var err error
	if started {
		stopped := make(chan struct{})
		go func() { c.services.Stop(); close(stopped) }()
		select {
		case <-stopped:
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
func (c *Client) Stopped() <-chan struct{} { return c.supervisor.Stopped() }

// Wait waits until serving has ended and returns why: nil after Stop, ErrRestart (with
// Config.ExitOnRestart), or the error that stopped it.
func (c *Client) Wait() error {
	<-c.Stopped()
	err := c.supervisor.Err()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
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
