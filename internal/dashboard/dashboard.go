// Package dashboard is pgflow-wasm's web dashboard: runs, a run's steps and tasks drawn as
// a graph, flows with their modules, and workers, server-rendered from pgflow's tables and
// updated live in the browser through Server-Sent Events.
//
// It reads the database only, unless Config.Actions allows its actions (start, cancel and
// rerun a run; drain, undrain and deprecate a worker), each audited as the CLI's are. Without Config.Token it answers only requests whose Host header is a
// loopback name, and Listen binds only a loopback address; with one, every request and event
// stream must carry it. New makes a Dashboard whose Handler can be mounted on a path
// (Config.BasePath) of another server; Listen serves one on an address of its own.
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
	"net/url"
	"path"
	"strings"
	"sync"
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
	// an Authorization: Bearer header). Without one only requests whose Host header is a
	// loopback name are answered, and Listen refuses a non-loopback address.
	Token string
	// Actions enables starting, cancelling and rerunning runs, and draining, undraining and
	// deprecating workers (each is logged; cancel, rerun, drain and undrain are recorded in
	// pgflow_wasm.operator_actions as the CLI's are).
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
	// MaxShapedFailures is how many failed tasks of its window the failures page groups at
	// most, the newest [store.DefaultMaxShaped].
	MaxShapedFailures int
	// NoRunsIndex keeps the dashboard from creating schema.RunsIndex when it is missing
	// (the benchmark measures the runs page without it).
	NoRunsIndex bool
	// BasePath is the path the dashboard is mounted on inside a larger server, e.g. "/ops":
	// every link, form, asset and event stream of its pages starts with it. "" is the root.
	BasePath string
	// TraceURL links each run page to the run's trace in a tracing UI: {trace_id} is
	// replaced by the run's trace id (32 hex digits, as the worker's spans carry it), {run_id}
	// by the run id, e.g. https://tempo.example/trace/{trace_id}. "" shows no link.
	TraceURL string
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

// Dashboard is a dashboard: an http.Handler over one database, with the background work
// its live pages need (a LISTEN session, the probes that re-read pages). Create it with New,
// serve Handler anywhere, and Close it when done.
type Dashboard struct {
	cfg      Config
	log      *slog.Logger
	base     string // Config.BasePath, normalised: "" or "/ops"
	store    *store.Store
	listener *live.Listener
	hub      *live.Hub
	pages    *pages
	guard    *guard
	streams  chan struct{} // a slot per open event stream
	handler  http.Handler

	ctx       context.Context // ends at Close: event streams end with it
	cancel    context.CancelFunc
	mu        sync.Mutex
	closed    bool           // under mu: no stream opens any more
	open      sync.WaitGroup // event streams still open (enter)
	indexDone chan struct{}  // closed when the runs index check ended
}

// maxStreams bounds the open event streams (each holds a goroutine and a watch).
const maxStreams = 200

// New opens a dashboard over cfg.Pool: it reads which pgflow the database has, starts
// listening for run events and, unless cfg.NoRunsIndex, creates the runs page's index in the
// background. It serves nothing by itself: mount Handler.
func New(ctx context.Context, cfg Config) (*Dashboard, error) {
	cfg = cfg.withDefaults()
	if cfg.Pool == nil {
		return nil, errors.New("dashboard: Config.Pool is required")
	}
	if cfg.Token != "" && len(cfg.Token) < MinTokenLength {
		return nil, fmt.Errorf("the dashboard token has %d characters: use at least %d (e.g. the output of `openssl rand -hex 32`)", len(cfg.Token), MinTokenLength)
	}
	base, err := basePath(cfg.BasePath)
	if err != nil {
		return nil, err
	}
	if err := CheckTraceURL(cfg.TraceURL); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.Pool)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: cfg, log: cfg.Log, base: base, store: st.WithStaleAfter(cfg.WorkerStaleAfter),
		streams: make(chan struct{}, maxStreams), indexDone: make(chan struct{})}
	if d.pages, err = newPages(base); err != nil {
		return nil, err
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	d.guard = newGuard(cfg.Token, secret[:], base, cfg.Log)
	d.ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	listenCfg := cfg.Pool.Config().ConnConfig.Copy()
	if listenCfg.RuntimeParams["application_name"] == "" {
		listenCfg.RuntimeParams["application_name"] = "pgflow-wasm dashboard" // findable in pg_stat_activity
	}
	d.listener = live.NewListener(listenCfg, cfg.Log)
	d.hub = live.NewHub(d.ctx, d.listener, cfg.Log, cfg.PollInterval, 10*cfg.PollInterval)
	go d.listener.Run(d.ctx)
	go func() {
		defer close(d.indexDone)
		if !cfg.NoRunsIndex {
			d.ensureRunsIndex(d.ctx)
		}
	}()
	d.handler = d.mount(d.guard.wrap(d.routes()))
	return d, nil
}

// basePath normalises Config.BasePath: "" and "/" are the root, "ops" and "/ops/" are "/ops".
func basePath(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if u, err := url.Parse(p); err != nil || u.Path != p || u.RawQuery != "" || u.Fragment != "" || path.Clean(p) != p {
		return "", fmt.Errorf("dashboard: BasePath %q is not a clean URL path such as /ops", p)
	}
	return p, nil
}

// Handler serves the dashboard. Requests reach it with their whole path (BasePath and
// all, as a ServeMux pattern "/ops/" hands them on): it strips BasePath itself, and answers
// 404 outside it. Without a Token it answers only requests whose Host is a loopback name.
func (d *Dashboard) Handler() http.Handler { return d.handler }

// BasePath is where the dashboard's pages are, "" at the root.
func (d *Dashboard) BasePath() string { return d.base }

// Close ends every event stream and the dashboard's background work, and waits for them.
// Its Handler then answers 503.
func (d *Dashboard) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.open.Wait()
	<-d.indexDone
}

// enter counts an event stream in, unless the dashboard is closed; the stream calls
// d.open.Done when it ends.
func (d *Dashboard) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.open.Add(1)
	return true
}

// mount strips BasePath and refuses requests once the dashboard is closed.
func (d *Dashboard) mount(next http.Handler) http.Handler {
	if d.base != "" {
		next = http.StripPrefix(d.base, next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.ctx.Err() != nil {
			http.Error(w, "the dashboard was closed", http.StatusServiceUnavailable)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, d.base)
		switch {
		case !ok || (rest != "" && rest[0] != '/'):
			http.NotFound(w, r)
		case rest == "":
			http.Redirect(w, r, d.base+"/", http.StatusMovedPermanently)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// path is a dashboard path ("/runs") as the browser must ask for it: under BasePath.
func (d *Dashboard) path(p string) string { return d.base + p }

// Server is a dashboard serving on an address of its own (`pgflow-wasm ui`, `serve
// --ui-addr`).
type Server struct {
	*Dashboard
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen binds addr and serves a New dashboard on it until Close. It refuses a non-loopback
// address without a token.
func Listen(ctx context.Context, addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if !isLoopback(ln.Addr()) && cfg.Token == "" {
		ln.Close()
		return nil, fmt.Errorf("%s is not a loopback address: anyone who reaches it could read every run's input and output; "+
			"give the dashboard a token (--ui-token or --ui-token-file) or bind 127.0.0.1", addr)
	}
	d, err := New(ctx, cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{Dashboard: d, ln: ln, done: make(chan struct{})}
	s.srv = &http.Server{
		Handler:           d.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Event streams live as long as their page: they end through BaseContext on Close.
		BaseContext: func(net.Listener) context.Context { return d.ctx },
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
func (s *Server) URL() string { return "http://" + s.Addr() + s.path("/") }

// Close ends every event stream and stops the server.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	s.Dashboard.Close()
	return err
}

// ensureRunsIndex creates the runs page's index when it is missing: in the background, so
// the dashboard serves at once, and concurrently, so no writer waits for it. A role that may
// not create it gets the statement to run by hand.
func (s *Dashboard) ensureRunsIndex(ctx context.Context) {
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

// routes are the dashboard's paths below BasePath.
func (s *Dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.path("/runs"), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /runs", s.runsPage)
	mux.HandleFunc("GET /runs/{id}", s.runPage)
	mux.HandleFunc("GET /runs/{id}/json/{field}", s.runJSON)
	mux.HandleFunc("GET /runs/{id}/steps/{step}/tasks/{index}/json/{field}", s.taskJSON)
	mux.HandleFunc("GET /search", s.searchPage)
	mux.HandleFunc("GET /stats", s.statsPage)
	mux.HandleFunc("GET /failures", s.failuresPage)
	mux.HandleFunc("GET /flows", s.flowsPage)
	mux.HandleFunc("GET /workers", s.workersPage)
	mux.HandleFunc("GET /events/runs", s.runsEvents)
	mux.HandleFunc("GET /events/runs/{id}", s.runEvents)
	mux.HandleFunc("GET /events/flows", s.flowsEvents)
	mux.HandleFunc("GET /events/workers", s.workersEvents)
	mux.HandleFunc("GET /events/stats", s.statsEvents)
	mux.HandleFunc("POST /actions/start", s.startRun)
	mux.HandleFunc("POST /actions/deprecate", s.deprecateWorker)
	mux.HandleFunc("POST /actions/cancel", s.cancelRun)
	mux.HandleFunc("POST /actions/rerun", s.rerunRun)
	mux.HandleFunc("POST /actions/drain", s.drainProcess)
	mux.HandleFunc("POST /actions/undrain", s.undrainProcess)
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	return mux
}
