// Package telemetry holds the worker's Prometheus metrics and its HTTP endpoints:
// /metrics, /livez (the process is up) and /readyz (taking work, database reachable).
package telemetry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo"
)

// Metrics are the worker's counters, gauges and histograms. A nil *Metrics is valid and
// records nothing, so tests and library users need not create one.
type Metrics struct {
	Registry       *prometheus.Registry     // the registry of its own; nil when registered elsewhere
	TasksStarted   *prometheus.CounterVec   // flow, step
	TasksCompleted *prometheus.CounterVec   // flow, step
	TasksFailed    *prometheus.CounterVec   // flow, step, kind
	TasksTimedOut  *prometheus.CounterVec   // flow, step
	TasksCancelled *prometheus.CounterVec   // flow, step: handlers stopped because pgflow cancelled their task
	TaskDuration   *prometheus.HistogramVec // flow, step: handler run time
	FuelUsed       *prometheus.CounterVec   // flow, step: work units handlers used
	InFlight       *prometheus.GaugeVec     // flow
	Polls          *prometheus.CounterVec   // flow, result: tasks | empty | error
	ReadLatency    *prometheus.HistogramVec // flow: read + start_tasks round trips
	Recovered      *prometheus.CounterVec   // flow: stalled tasks requeued or failed by the sweep
	DBErrors       *prometheus.CounterVec   // operation, class, sqlstate: statements the database refused (dberr)
	Unwritten      prometheus.Gauge         // outcomes finished and not yet written
	Abandoned      prometheus.GaugeFunc

	// What an SRE alerts on (docs/operations.md, "Metrics and alerts"). Every label is a
	// flow, step or queue of the flows file, or one of a few fixed words.
	QueueWait      *prometheus.HistogramVec // flow: enqueue to start of first attempts
	RunsStarted    *prometheus.CounterVec   // flow: runs whose first task this worker started
	RunsCompleted  *prometheus.CounterVec   // flow: runs this worker's write completed
	RunsFailed     *prometheus.CounterVec   // flow: runs this worker's write failed
	RunDuration    *prometheus.HistogramVec // flow, status: run start to end, for the runs above
	TasksRetried   *prometheus.CounterVec   // flow, step: failures pgflow queued again
	TasksRequeued  *prometheus.CounterVec   // flow, reason: tasks put back without a failure (stalled, hand_back)
	ScheduleTicks  *prometheus.CounterVec   // flow, result: started | taken
	ScheduleMissed *prometheus.CounterVec   // flow: ticks whose run this worker could not start within the grace
	Reloads        *prometheus.CounterVec   // result: applied | refused
	ReloadOK       prometheus.Gauge         // 1 when the last reload was applied (or none was tried), 0 when refused

	queues *queueCollector
	names  []string

	// Outbound HTTP of handlers (capabilities). host is the http.allow entry a request
	// matched, so the series are bounded by flows.yaml whatever URLs handlers make up.
	HTTPRequests *prometheus.CounterVec   // flow, step, host, result: 2xx..5xx, network, timeout, canceled
	HTTPDenials  *prometheus.CounterVec   // flow, step, reason
	HTTPBytes    *prometheus.CounterVec   // flow, step, host, direction: sent | received (bodies)
	HTTPLatency  *prometheus.HistogramVec // flow, step, host: time to the response headers

	// SQL of handlers (capabilities). No series carries a statement's text or a value.
	SQLStatements   *prometheus.CounterVec   // flow, step: requests, refused ones included
	SQLRows         *prometheus.CounterVec   // flow, step: rows returned or changed
	SQLErrors       *prometheus.CounterVec   // flow, step, code: SQLSTATE, or refused, bad_request, max_rows, ...
	SQLLatency      *prometheus.HistogramVec // flow, step: time in the database per request
	SQLTransactions *prometheus.CounterVec   // flow, step, result: committed | rolled_back | unknown
}

// NewMetrics registers every metric in reg; with a nil reg, in a fresh registry (plus Go
// and process collectors), kept in Metrics.Registry. abandoned reports the sandbox's
// abandoned calls.
func NewMetrics(reg prometheus.Registerer, abandoned func() int) *Metrics {
	var own *prometheus.Registry
	if reg == nil {
		own = prometheus.NewRegistry()
		own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = own
	}
	f := &promauto{r: reg}
	registerBuildInfo(reg)
	queues := newQueueCollector()
	reg.MustRegister(queues)
	flowStep := []string{"flow", "step"}
	flow := []string{"flow"}
	m := &Metrics{
		Registry: own,
		queues:   queues,
		QueueWait: f.histogram("pgflow_wasm_task_queue_wait_seconds", "Time a task's message waited in its queue before this worker started the task "+
			"(enqueue to start_tasks; first attempts only: a retry keeps its first enqueue time).", flow, prometheus.ExponentialBuckets(0.005, 4, 10)),
		RunsStarted: f.counter("pgflow_wasm_runs_started_total", "Runs whose first task this worker started "+
			"(the first root step's task 0, first attempt).", flow),
		RunsCompleted: f.counter("pgflow_wasm_runs_completed_total", "Runs that completed with an outcome this worker wrote (each run counted once, by one worker).", flow),
		RunsFailed:    f.counter("pgflow_wasm_runs_failed_total", "Runs that failed with an outcome this worker wrote (each run counted once, by one worker).", flow),
		RunDuration: f.histogram("pgflow_wasm_run_duration_seconds", "Run time from pgflow's start of the run to its end, for the runs counted "+
			"completed or failed here.", []string{"flow", "status"}, prometheus.ExponentialBuckets(0.01, 4, 12)),
		TasksRetried: f.counter("pgflow_wasm_tasks_retried_total", "Task failures pgflow queued again for another attempt.", flowStep),
		TasksRequeued: f.counter("pgflow_wasm_tasks_requeued_total", "Tasks put back in their queue without a failure: stalled (the sweep found "+
			"their worker dead) or hand_back (this worker's own start whose reply was lost).", []string{"flow", "reason"}),
		ScheduleTicks: f.counter("pgflow_wasm_schedule_ticks_total", "Schedule ticks, by result: started (this worker started the run) or "+
			"taken (another worker did).", []string{"flow", "result"}),
		ScheduleMissed: f.counter("pgflow_wasm_schedule_missed_ticks_total", "Schedule ticks this worker could not start a run for within the "+
			"grace (the database did not answer).", flow),
		Reloads:        f.counter("pgflow_wasm_reloads_total", "Reloads of the flows file and its modules, by result: applied or refused.", []string{"result"}),
		ReloadOK:       f.gauge("pgflow_wasm_reload_last_successful", "1 when the last reload was applied or none was tried; 0 while the last one was refused.", nil).WithLabelValues(),
		TasksStarted:   f.counter("pgflow_wasm_tasks_started_total", "Tasks started by this worker.", flowStep),
		TasksCompleted: f.counter("pgflow_wasm_tasks_completed_total", "Tasks whose output pgflow recorded.", flowStep),
		TasksFailed:    f.counter("pgflow_wasm_tasks_failed_total", "Tasks that failed (pgflow retries them while attempts remain), by error kind.", []string{"flow", "step", "kind"}),
		TasksTimedOut:  f.counter("pgflow_wasm_tasks_timed_out_total", "Tasks stopped at their step timeout.", flowStep),
		TasksCancelled: f.counter("pgflow_wasm_tasks_cancelled_total", "Handlers stopped because pgflow cancelled their task (its run failed, its step was skipped).", flowStep),
		FuelUsed: f.counter("pgflow_wasm_fuel_used_total", "Work handlers did, in fuel units (about one WebAssembly instruction each; "+
			"always counted on wazero, on wasmtime for steps with `fuel`).", flowStep),
		TaskDuration: f.histogram("pgflow_wasm_task_duration_seconds", "Handler run time per task.", flowStep,
			prometheus.ExponentialBuckets(0.0001, 4, 12)),
		InFlight: f.gauge("pgflow_wasm_tasks_in_flight", "Tasks running now.", []string{"flow"}),
		Polls:    f.counter("pgflow_wasm_polls_total", "Queue reads, by result: tasks, empty or error.", []string{"flow", "result"}),
		ReadLatency: f.histogram("pgflow_wasm_queue_read_seconds", "Time to read a batch and start its tasks.", []string{"flow"},
			prometheus.ExponentialBuckets(0.0005, 2, 14)),
		Recovered: f.counter("pgflow_wasm_tasks_recovered_total", "Stalled tasks the recovery sweep returned to pgflow.", []string{"flow"}),
		DBErrors: f.counter("pgflow_wasm_database_errors_total", "Statements the database refused, by operation, class (transient, verdict, ours) and SQLSTATE.",
			[]string{"operation", "class", "sqlstate"}),
		Unwritten: f.gauge("pgflow_wasm_outcomes_unwritten", "Outcomes of finished handlers not written yet (kept while the database refuses writes).", nil).WithLabelValues(),
		Abandoned: f.gaugeFunc("pgflow_wasm_sandbox_abandoned_calls", "Handler calls past their deadline that the engine could not stop yet.",
			func() float64 { return float64(abandoned()) }),
		HTTPRequests: f.counter("pgflow_wasm_http_requests_total", "HTTP requests handlers sent (redirect hops included), by allow entry and result.",
			[]string{"flow", "step", "host", "result"}),
		HTTPDenials: f.counter("pgflow_wasm_http_denials_total", "HTTP requests of handlers refused by their step's http section, by reason.",
			[]string{"flow", "step", "reason"}),
		HTTPBytes: f.counter("pgflow_wasm_http_body_bytes_total", "Body bytes of handlers' HTTP requests (sent) and responses (received).",
			[]string{"flow", "step", "host", "direction"}),
		HTTPLatency: f.histogram("pgflow_wasm_http_request_seconds", "Time from sending a handler's HTTP request to its response headers.",
			[]string{"flow", "step", "host"}, prometheus.ExponentialBuckets(0.001, 4, 9)),
		SQLStatements: f.counter("pgflow_wasm_sql_statements_total", "SQL requests of handlers (sql_query), refused ones included.", flowStep),
		SQLRows:       f.counter("pgflow_wasm_sql_rows_total", "Rows handlers' SQL statements returned or changed.", flowStep),
		SQLErrors: f.counter("pgflow_wasm_sql_errors_total", "SQL requests of handlers that failed, by SQLSTATE or reason "+
			"(refused, bad_request, max_rows, max_result_bytes, role_changed, connection).", []string{"flow", "step", "code"}),
		SQLLatency: f.histogram("pgflow_wasm_sql_statement_seconds", "Time of a handler's SQL request in the database (one round trip, "+
			"two outside a transactional step).", flowStep, prometheus.ExponentialBuckets(0.0002, 4, 10)),
		SQLTransactions: f.counter("pgflow_wasm_sql_transactions_total", "Transactions of transactional steps, by how they ended: "+
			"committed with the task's completion, rolled_back, or unknown (the COMMIT's answer was lost).", []string{"flow", "step", "result"}),
	}
	m.ReloadOK.Set(1)
	m.names = append(f.names, "pgflow_wasm_build_info", "pgflow_wasm_queue_visible_messages",
		"pgflow_wasm_queue_oldest_message_age_seconds", "pgflow_wasm_queue_stats_errors_total")
	return m
}

// Names are the names of the metrics this package exports (histograms without their
// _bucket, _sum and _count suffixes).
func (m *Metrics) Names() []string { return slices.Clone(m.names) }

// SQLObserver records one step's SQL; it is the worker's sqlsession.Observer. Nil metrics
// give nil, which records nothing.
func (m *Metrics) SQLObserver(flow, step string) *StepSQL {
	if m == nil {
		return nil
	}
	return &StepSQL{m: m, flow: flow, step: step, statements: m.SQLStatements.WithLabelValues(flow, step),
		rows: m.SQLRows.WithLabelValues(flow, step), latency: m.SQLLatency.WithLabelValues(flow, step)}
}

// StepSQL is one step's SQL metrics.
type StepSQL struct {
	m                *Metrics
	flow, step       string
	statements, rows prometheus.Counter
	latency          prometheus.Observer
}

// Statement counts one request: its time, its rows, and its error code ("" when none).
func (o *StepSQL) Statement(took time.Duration, rows int, code string) {
	o.statements.Inc()
	if took > 0 {
		o.latency.Observe(took.Seconds())
	}
	if rows > 0 {
		o.rows.Add(float64(rows))
	}
	if code != "" {
		o.m.SQLErrors.WithLabelValues(o.flow, o.step, code).Inc()
	}
}

// Transaction counts how a transactional task's transaction ended.
func (o *StepSQL) Transaction(result string) {
	o.m.SQLTransactions.WithLabelValues(o.flow, o.step, result).Inc()
}

// HTTPObserver records one step's outbound HTTP; it is the sandbox's httpcap.Observer.
// Nil metrics give nil, which records nothing.
func (m *Metrics) HTTPObserver(flow, step string) *StepHTTP {
	if m == nil {
		return nil
	}
	return &StepHTTP{m: m, flow: flow, step: step}
}

// StepHTTP is one step's outbound HTTP metrics.
type StepHTTP struct {
	m          *Metrics
	flow, step string
}

// Request counts one request sent and its time to the response headers.
func (o *StepHTTP) Request(host, result string, took time.Duration) {
	o.m.HTTPRequests.WithLabelValues(o.flow, o.step, host, result).Inc()
	o.m.HTTPLatency.WithLabelValues(o.flow, o.step, host).Observe(took.Seconds())
}

// Bytes counts the body bytes of one exchange.
func (o *StepHTTP) Bytes(host string, sent, received int64) {
	o.m.HTTPBytes.WithLabelValues(o.flow, o.step, host, "sent").Add(float64(sent))
	o.m.HTTPBytes.WithLabelValues(o.flow, o.step, host, "received").Add(float64(received))
}

// Denied counts one refused request.
func (o *StepHTTP) Denied(reason string) {
	o.m.HTTPDenials.WithLabelValues(o.flow, o.step, reason).Inc()
}

// registerBuildInfo exports what the binary is as the usual constant-1 gauge, so a
// dashboard can tell which release each worker runs.
func registerBuildInfo(reg prometheus.Registerer) {
	bi := buildinfo.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pgflow_wasm_build_info",
		Help: "The running binary: version, commit, engines compiled in and the embedded pgflow SQL's version; always 1.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.Commit, "engines": bi.EngineList(),
			"pgflow_sql": bi.PgflowSQL, "goversion": bi.Go}})
	g.Set(1)
	reg.MustRegister(g)
}

type promauto struct {
	r     prometheus.Registerer
	names []string
}

func (p *promauto) counter(name, help string, labels []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	p.r.MustRegister(c)
	p.names = append(p.names, name)
	return c
}

func (p *promauto) gauge(name, help string, labels []string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	p.r.MustRegister(g)
	p.names = append(p.names, name)
	return g
}

func (p *promauto) histogram(name, help string, labels []string, buckets []float64) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	p.r.MustRegister(h)
	p.names = append(p.names, name)
	return h
}

func (p *promauto) gaugeFunc(name, help string, fn func() float64) prometheus.GaugeFunc {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn)
	p.r.MustRegister(g)
	p.names = append(p.names, name)
	return g
}

// Health is what /readyz reports. The zero value is not ready.
//
// A process serves one worker at a time, but a reload or a restart on a fresh engine starts
// a new worker while the old one drains: the process's Health follows the worker that serves
// (Follow), so the old worker's drain and database calls say nothing about readiness.
type Health struct {
	draining atomic.Bool
	dbUp     atomic.Bool
	started  atomic.Bool
	follows  atomic.Pointer[Health]
	waiting  atomic.Pointer[string] // what the worker waits for before it serves again; nil: nothing
}

// SetStarted marks the worker as registered and taking work.
func (h *Health) SetStarted() { h.started.Store(true) }

// SetDraining marks the worker as stopping: it takes no new work.
func (h *Health) SetDraining() { h.draining.Store(true) }

// SetWaiting says what the worker waits for before it takes work again (pgflow changed
// under it, say); "" when it waits for nothing.
func (h *Health) SetWaiting(what string) {
	if what == "" {
		h.waiting.Store(nil)
		return
	}
	h.waiting.Store(&what)
}

// SetDatabase records whether the last database call succeeded.
func (h *Health) SetDatabase(up bool) { h.dbUp.Store(up) }

// Follow makes h report w's health from now on: w is the serving worker's own.
func (h *Health) Follow(w *Health) {
	if w != h {
		h.follows.Store(w)
	}
}

// Ready reports whether the worker takes work and reaches its database, and if not, what it
// waits for.
func (h *Health) Ready() (bool, string) {
	if w := h.follows.Load(); w != nil {
		return w.Ready()
	}
	switch {
	case h.draining.Load():
		return false, "draining: the worker is stopping and takes no new tasks"
	case !h.started.Load():
		return false, "starting: waiting to check pgflow in the database and register this worker's flows"
	case h.waiting.Load() != nil:
		return false, *h.waiting.Load()
	case !h.dbUp.Load():
		return false, "database unreachable: waiting for a database call to succeed (retrying with backoff)"
	}
	return true, "ok"
}

// Handler answers /livez (the process runs) and /readyz (Ready: 200 "ok", or 503 with what
// the worker waits for), for probes.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := h.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(why + "\n"))
	})
	return mux
}

// Server serves /metrics, /livez and /readyz.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (e.g. ":9090" or "127.0.0.1:0") and starts serving.
func Listen(addr string, m *Metrics, h *Health) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	if m != nil && m.Registry != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	}
	mux.Handle("/", h.Handler())
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener closed under us; Close reports nothing more useful
		}
	}()
	return s, nil
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server.
func (s *Server) Close(ctx context.Context) error { return s.srv.Shutdown(ctx) }
