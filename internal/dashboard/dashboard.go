// Package dashboard is pgflow-wasm's web dashboard: runs, a run's steps and tasks drawn as
// a graph, flows with their modules, and workers, server-rendered from pgflow's tables and
// updated live in the browser through Server-Sent Events.
//
// It reads the database only, unless Config.Actions allows its two actions (start a run,
// deprecate a worker). It answers on a loopback address without a token; any other
// address needs Config.Token, which every request and event stream must then carry.
// Templates, style sheet and script are embedded: it works offline, without a CDN.
package dashboard

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/live"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// DefaultAddr is where `pgflow-wasm ui` listens unless told otherwise: loopback only.
const DefaultAddr = "127.0.0.1:8080"

// MinTokenLength is the shortest token accepted: a guessable token on an open port would
// be worse than none.
const MinTokenLength = 16

// Config is what a dashboard needs.
type Config struct {
	Pool *pgxpool.Pool // the database with pgflow's schema
	Log  *slog.Logger
	// Token, when set, is required on every request (as ?token= once, then a cookie, or
	// an Authorization: Bearer header). Required for a non-loopback address.
	Token string
	// Actions enables starting runs and deprecating workers (each is logged).
	Actions bool
	// Flows returns the flows file the worker serves now, when known (nil: unknown): the
	// flows page shows each step's module from it. Modules describes a step's loaded module
	// (sha256, ABI). Both follow a worker that reloads its flows (`serve --ui-addr`).
	Flows   func() *flowfile.File
	Modules ModuleInfo
	// PollInterval is how often a page showing something still running is re-read even
	// without events (map tasks send none); settled pages are re-read 10 times less often.
	PollInterval time.Duration
	// WorkerStaleAfter is how long a worker may go without a heartbeat and still count as
	// alive (the workers' own --worker-stale-after; default liveness.DefaultStaleAfter).
	WorkerStaleAfter time.Duration
	// TasksPerPage is how many tasks of one step a run page lists at once.
	TasksPerPage int
	// NoRunsIndex keeps the dashboard from creating schema.RunsIndex when it is missing
	// (the benchmark measures the runs page without it).
	NoRunsIndex bool
}

// ModuleInfo returns the module a flow's step runs, as the sandbox loaded it.
type ModuleInfo func(flow, step string) (sandbox.Info, bool)

func (c Config) withDefaults() Config {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.TasksPerPage <= 0 {
		c.TasksPerPage = 20
	}
	return c
}

// Server is a running dashboard.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    *store.Store
	listener *live.Listener
	hub      *live.Hub
	pages    *pages
	guard    *guard
	streams  chan struct{} // a slot per open event stream

	ln        net.Listener
	srv       *http.Server
	cancel    context.CancelFunc
	done      chan struct{}
	indexDone chan struct{} // closed when the runs index check ended
}

// maxStreams bounds the open event streams (each holds a goroutine and a watch).
const maxStreams = 200

// Listen binds addr and serves the dashboard until Close. It refuses a non-loopback
// address without a token.
func Listen(ctx context.Context, addr string, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Pool == nil {
		return nil, errors.New("dashboard: Config.Pool is required")
	}
	if cfg.Token != "" && len(cfg.Token) < MinTokenLength {
		return nil, fmt.Errorf("the dashboard token has %d characters: use at least %d (e.g. the output of `openssl rand -hex 32`)", len(cfg.Token), MinTokenLength)
	}
	st, err := store.Open(ctx, cfg.Pool)
	if err != nil {
		return nil, err
	}
	st = st.WithStaleAfter(cfg.WorkerStaleAfter)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if !isLoopback(ln.Addr()) && cfg.Token == "" {
		ln.Close()
		return nil, fmt.Errorf("%s is not a loopback address: anyone who reaches it could read every run's input and output; "+
			"give the dashboard a token (--ui-token or --ui-token-file) or bind 127.0.0.1", addr)
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	s := &Server{cfg: cfg, log: cfg.Log, store: st, ln: ln, done: make(chan struct{}), streams: make(chan struct{}, maxStreams),
		indexDone: make(chan struct{})}
	s.guard = newGuard(cfg.Token, secret[:], isLoopback(ln.Addr()), cfg.Log)
	s.pages, err = newPages()
	if err != nil {
		ln.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	listenCfg := cfg.Pool.Config().ConnConfig.Copy()
	if listenCfg.RuntimeParams["application_name"] == "" {
		listenCfg.RuntimeParams["application_name"] = "pgflow-wasm dashboard" // findable in pg_stat_activity
	}
	s.listener = live.NewListener(listenCfg, cfg.Log)
	s.hub = live.NewHub(runCtx, s.listener, cfg.Log, cfg.PollInterval, 10*cfg.PollInterval)
	go s.listener.Run(runCtx)
	go func() {
		defer close(s.indexDone)
		if !cfg.NoRunsIndex {
			s.ensureRunsIndex(runCtx)
		}
	}()
	s.srv = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Event streams live as long as their page: they end through BaseContext on Close.
		BaseContext: func(net.Listener) context.Context { return runCtx },
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("dashboard stopped serving", "error", err)
		}
	}()
	return s, nil
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the dashboard's address as a link.
func (s *Server) URL() string { return "http://" + s.Addr() + "/" }

// Close ends every event stream and stops the server.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	<-s.indexDone
	return err
}

// ensureRunsIndex creates the runs page's index when it is missing: in the background, so
// the dashboard serves at once, and concurrently, so no writer waits for it. A role that may
// not create it gets the statement to run by hand.
func (s *Server) ensureRunsIndex(ctx context.Context) {
	pool := s.store.Pool()
	if exists, valid, err := schema.RunsIndexValid(ctx, pool); err != nil || (exists && valid) {
		return // an unreachable database is reported by the pages
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer conn.Release()
	start := time.Now()
	s.log.Info("dashboard: creating index pgflow."+schema.RunsIndex+" on pgflow.runs (started_at desc, run_id desc) for the runs page; "+
		"concurrently: writers are not blocked", "index", schema.RunsIndex)
	state, err := schema.EnsureRunsIndex(ctx, conn.Conn())
	switch {
	case ctx.Err() != nil:
	case err != nil:
		s.log.Warn("dashboard: could not create the runs page's index; until it exists the runs page sorts every run "+
			"(tens of ms a page at 100,000 runs). Create it as the owner of pgflow.runs: "+schema.RunsIndexSQL, "error", err)
	case state == schema.RunsIndexBusy:
		s.log.Info("dashboard: another pgflow-wasm process is creating index pgflow." + schema.RunsIndex)
	default:
		s.log.Info("dashboard: "+string(state)+" index pgflow."+schema.RunsIndex+": the runs page reads its rows from it instead of sorting every run",
			"took", time.Since(start).Round(time.Millisecond))
	}
}

// isLoopback reports whether a listener's address is a loopback one (127.0.0.0/8, ::1).
// An unspecified address (":8080", "0.0.0.0") listens on every interface: not loopback.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/runs", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /runs", s.runsPage)
	mux.HandleFunc("GET /runs/{id}", s.runPage)
	mux.HandleFunc("GET /runs/{id}/json/{field}", s.runJSON)
	mux.HandleFunc("GET /runs/{id}/steps/{step}/tasks/{index}/json/{field}", s.taskJSON)
	mux.HandleFunc("GET /flows", s.flowsPage)
	mux.HandleFunc("GET /workers", s.workersPage)
	mux.HandleFunc("GET /events/runs", s.runsEvents)
	mux.HandleFunc("GET /events/runs/{id}", s.runEvents)
	mux.HandleFunc("GET /events/flows", s.flowsEvents)
	mux.HandleFunc("GET /events/workers", s.workersEvents)
	mux.HandleFunc("POST /actions/start", s.startRun)
	mux.HandleFunc("POST /actions/deprecate", s.deprecateWorker)
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	return s.guard.wrap(mux)
}
