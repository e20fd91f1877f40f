// Package worker is the pgflow-wasm worker: one process serving every flow of a flows file.
//
// For each flow it registers a row in pgflow.workers, heartbeats it, fetches tasks (package
// poller), runs each in a fresh sandbox instance (package sandbox) under the step's timeout and
// memory limit, and hands the outcome to the completer, which writes complete_task/fail_task in
// group-committed batches. A recovery sweep returns tasks stalled by dead workers to pgflow.
// On shutdown it stops fetching, drains running tasks up to a deadline, fails what remains so
// pgflow retries it elsewhere, and marks its worker rows deprecated.
//
// docs/state_machine.md draws the life of a task through these pieces.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo"
	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetchlease"
	"github.com/pgflow-wasm/pgflow-wasm/internal/heartbeat"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/recovery"
	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// ErrRestart is returned by Run when the worker stopped itself because handler calls
// abandoned by the sandbox's watchdog piled up: the process should start afresh.
var ErrRestart = errors.New("too many abandoned handler calls: restart the worker")

// Config configures a Worker. Zero values take the Default constants below.
type Config struct {
	Flows   *flowfile.File
	Pool    *pgxpool.Pool
	Engine  sandbox.Engine
	Log     *slog.Logger       // [slog.Default()]
	Metrics *telemetry.Metrics // optional
	Health  *telemetry.Health  // optional
	Hooks   pgflowtype.Hooks   // optional

	Concurrency int // tasks running at once across all flows
	BatchSize   int // messages per read

	// Signal is how the worker learns of new tasks (a queue that cannot notify is polled
	// instead). Notify starts a run's first task within milliseconds of an idle minute, where
	// polling waits for its backoff.
	Signal          pgflowtype.Signal
	MinPollInterval time.Duration
	MaxPollInterval time.Duration
	// NotifyFallback is how often a notified flow polls anyway: messages that become visible
	// again (a retry's delay, a dead reader's visibility running out) send no notification
	NotifyFallback time.Duration

	HeartbeatInterval time.Duration
	WorkerStaleAfter  time.Duration // a pgflow-wasm worker silent this long is dead to recovery
	// LivenessGrace: a pgflow-wasm worker whose liveness lock has been gone this long is dead
	// (package liveness)
	LivenessGrace    time.Duration
	RecoveryInterval time.Duration
	StalledMargin    time.Duration // added to a step's timeout before its task counts as stalled
	// ForeignStaleAfter: tasks of workers of another kind (pgflow's TypeScript worker) are
	// recovered once their worker's heartbeat is this old; negative never
	ForeignStaleAfter time.Duration
	// RequeueGuardInterval and RequeueGuardAfter tune the locks that keep pgflow 0.13.2+'s
	// requeue_stalled_tasks off long tasks (requeueguard.go); a negative After
	// turns the guard off.
	RequeueGuardInterval, RequeueGuardAfter time.Duration
	// MaxUnwritten bounds the outcomes waiting to be written: while more wait, no task is
	// fetched, so a stalled database never piles up finished work in memory
	// [CompletionBatch x CompletionWriters + 2 x Concurrency]
	MaxUnwritten int

	DrainTimeout time.Duration // how long shutdown waits for running tasks
	// Process is the worker process this worker belongs to, registered in
	// pgflow_wasm.worker_processes: an operator drains and undrains it as a whole (package
	// procctl), and the flag is read every HeartbeatInterval. The supervisor gives every
	// worker it starts (one per reload or engine restart) the same; [a fresh id, this host,
	// pid and version].
	Process procctl.Process
	// CancelCheckInterval is how often the handlers that have run at least this long are
	// checked against pgflow: one whose task pgflow cancelled is stopped (cancel.go)
	CancelCheckInterval time.Duration
	// AttemptHistory is how long failed attempts are kept in pgflow_wasm.task_attempts
	// (pgflow keeps only a task's last error); negative keeps none.
	AttemptHistory  time.Duration
	MaxAbandoned    int // abandoned sandbox calls that make the worker restart itself
	CompletionBatch int // outcomes per write transaction
	// PgflowCheckInterval is how often the worker looks whether pgflow was changed under it
	// (a catalogue fingerprint, pgflowwatch.go); errors that say so make it look at once.
	// Negative: only errors make it look.
	PgflowCheckInterval time.Duration
	// CompletionWriters is how many write transactions may be in flight at once:
	// complete_task is heavy, and one transaction at a time keeps one database core busy.
	CompletionWriters int
	// FetchLeases is how many workers may read one queue at a time (package fetchlease); a
	// worker without a lease leaves the queue to those with one. 0 is automatic: one lease
	// per queue once the recovery sweep counts two live workers reading its flow, none while
	// a worker reads alone. Negative: every worker reads.
	FetchLeases int
}

// The defaults of Config's zero values, each named once; the root package's XxxDefault
// constants are these.
const (
	DefaultConcurrency       = 32
	DefaultBatchSize         = 32
	DefaultSignal            = pgflowtype.SignalNotify
	DefaultMinPollInterval   = 100 * time.Millisecond
	DefaultMaxPollInterval   = 5 * time.Second
	DefaultNotifyFallback    = 10 * time.Second
	DefaultHeartbeatInterval = liveness.DefaultHeartbeatInterval
	DefaultWorkerStaleAfter  = liveness.DefaultStaleAfter
	DefaultLivenessGrace     = recovery.DefaultLivenessGrace
	DefaultRecoveryInterval  = 2 * time.Second
	DefaultStalledMargin     = 20 * time.Second
	DefaultForeignStaleAfter = 10 * time.Minute
	// The requeue guard's interval and the task age it starts guarding at (requeueguard.go).
	DefaultRequeueGuardInterval = 5 * time.Second
	DefaultRequeueGuardAfter    = 10 * time.Second
	DefaultDrainTimeout         = 30 * time.Second
	DefaultCancelCheckInterval  = 500 * time.Millisecond
	DefaultPgflowCheckInterval  = 5 * time.Second
	DefaultAttemptHistory       = 7 * 24 * time.Hour
	DefaultMaxAbandoned         = 4
	DefaultCompletionBatch      = completer.DefaultMaxBatch
	DefaultCompletionWriters    = completer.DefaultWriters
	// DefaultFetchLeases is automatic: one lease per queue once two workers read it.
	DefaultFetchLeases = 0
)

// WithDefaults returns the config with every unset option at its default (the Default
// constants above).
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Health == nil {
		c.Health = &telemetry.Health{}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Signal == "" {
		c.Signal = DefaultSignal
	}
	def(&c.MinPollInterval, DefaultMinPollInterval)
	def(&c.MaxPollInterval, DefaultMaxPollInterval)
	def(&c.NotifyFallback, DefaultNotifyFallback)
	def(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&c.WorkerStaleAfter, DefaultWorkerStaleAfter)
	def(&c.LivenessGrace, DefaultLivenessGrace)
	def(&c.RecoveryInterval, DefaultRecoveryInterval)
	def(&c.StalledMargin, DefaultStalledMargin)
	def(&c.RequeueGuardInterval, DefaultRequeueGuardInterval)
	if c.RequeueGuardAfter == 0 { // negative turns the guard off
		c.RequeueGuardAfter = DefaultRequeueGuardAfter
	}
	if c.ForeignStaleAfter == 0 { // negative: never
		c.ForeignStaleAfter = DefaultForeignStaleAfter
	}
	def(&c.DrainTimeout, DefaultDrainTimeout)
	if c.Process.ID == "" {
		c.Process = procctl.Self(kit.NewUUID(), buildinfo.Get().Version)
	}
	def(&c.CancelCheckInterval, DefaultCancelCheckInterval)
	if c.PgflowCheckInterval == 0 { // negative: only errors make the worker look
		c.PgflowCheckInterval = DefaultPgflowCheckInterval
	}
	if c.AttemptHistory == 0 { // negative keeps none
		c.AttemptHistory = DefaultAttemptHistory
	}
	if c.MaxAbandoned <= 0 {
		c.MaxAbandoned = DefaultMaxAbandoned
	}
	if c.CompletionBatch <= 0 {
		c.CompletionBatch = DefaultCompletionBatch
	}
	if c.CompletionWriters <= 0 {
		c.CompletionWriters = DefaultCompletionWriters
	}
	if c.MaxUnwritten <= 0 {
		// Room for every writer's full batch plus what the handlers finish meanwhile: a
		// smaller bound kept the completer from filling its batches.
		c.MaxUnwritten = c.CompletionBatch*c.CompletionWriters + 2*c.Concurrency
	}
	return c
}

// Worker serves the flows of one flows file. Create with New, then Run.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	flows    []*flowState
	byFlow   map[string]*flowState
	byWorker map[string]*flowState // by pgflow.workers id
	global   *slots
	done     *completer.Completer
	leases   *fetchlease.Leases // nil: every worker reads (Config.FetchLeases)
	// readerCounts is how many sweeps have counted the flows' live readers (leases.go).
	readerCounts atomic.Int32
	// claimGate is held (read) by each claim of successors from its start until its tasks
	// are launched; the drain takes it (write) to end claims, so none launches a task
	// while it waits for the running ones (claim.go).
	claimGate sync.RWMutex
	noClaims  bool // guarded by claimGate
	// own are the insert notifications of claiming commits, which the listener drops
	// (claim.go); nil without a listener.
	own     *poller.OwnNotices
	known   taskSet        // tasks launched whose outcome is not written yet (orphans.go)
	running sync.WaitGroup // tasks in flight
	// proto is the pgflow the database speaks, read at Run and again whenever pgflow changes
	// under the worker (pgflowwatch.go); upgrade is that watch's state.
	proto   atomic.Pointer[schema.Protocol]
	upgrade upgradeState
	// drained: an operator drained this worker's process (drain.go): no new tasks.
	drained atomic.Bool
	// drainApplied: drained, and the fetches and claims begun before it ended (Drained).
	drainApplied atomic.Bool
	// processKnown: the process and its rows are registered, so the drain flag is watched.
	processKnown bool

	// runCtx is the context handlers run under; it is cancelled only when the drain
	// deadline passes, never by the first shutdown signal.
	runCtx    context.Context
	cancelRun context.CancelFunc

	service.State // Started: registered, its queues fetching; Stopped: Run returned
	stopOnce      sync.Once
	stop          chan struct{} // closed by Drain: the worker drains and ends
	restart       atomic.Bool
	launched      atomic.Bool // Start ran: a worker serves once
	// history: pgflow_wasm.task_attempts exists and failures are kept in it (set in Run).
	history bool
	// sqlPools are the handlers' SQL pools by database_env, role and password_env, each
	// logged in as its role.
	sqlPools map[string]*pgxpool.Pool
	// stepProofKey makes the proofs transactional steps complete their tasks with
	// (schema.StepProof); read at start when a step is transactional.
	stepProofKey []byte
	prunedAt     time.Time // the recovery loop's last prune of the history
	// ownRequeues counts, per task, the requeues of the hand-back that gave the attempt
	// back (orphans.go); only the recovery loop touches it.
	ownRequeues map[taskKey]int
}

// flowState is one served flow.
type flowState struct {
	def         *flowfile.Flow
	workerID    string
	handlerTime ewma                  // how long its handlers take (fetch leases: leases.go)
	steps       map[string]*stepState // the steps this worker serves (not the external ones)
	// queues are the pgmq queues its tasks come from: the flow's queue, or on pgflow 0.17+
	// the queue of each served step of a flow with per-step queues. Set by Run.
	queues     []*queueState
	slots      *slots       // per-flow limit; nil when only the global one applies
	fetching   atomic.Int32 // fetches in flight, or whose tasks are being launched
	fetches    atomic.Int64 // fetches ended (orphans.go)
	deprecated atomic.Bool
	inFlight   prometheus.Gauge // nil without metrics
	// readers is how many live pgflow-wasm workers read the flow, this one included, as the
	// last recovery sweep counted them; 0 until counted. It spreads the sweeps
	// (recoveryloop.go) and switches automatic fetch leases on (leases.go).
	readers atomic.Int32
}

// queueState is one queue a flow's tasks are read from, with its own fetch loop.
type queueState struct {
	fs       *flowState
	name     string // the pgmq queue
	step     string // the step a per-step queue carries; "" for the flow's queue
	fetcher  *poller.Fetcher
	wake     poller.Wake
	notified bool // inserts notify (--signal notify): idle, it waits for them
	starved  atomic.Bool
	// Fetch lease state, touched only by the queue's own loop (leases.go).
	fullSince    time.Time   // when the loop last found every handler slot taken, while it still is
	leaseRetryAt time.Time   // no lease: when to ask again
	leaseRetry   kit.Backoff // no lease: the wait before asking again, growing while refused
	fetchTime    ewma        // how long its fetches take
	lastTasksAt  time.Time   // when a read last found tasks
	// foundTasks: a claim of successors (claim.go) started tasks of this queue since the
	// loop last looked, so its polling backoff starts again from the shortest interval.
	foundTasks atomic.Bool
}

// ring makes every fetch loop of the flow look at its queue now.
func (fs *flowState) ring() {
	for _, q := range fs.queues {
		q.wake.Ring()
	}
}

// stepState is one step with its loaded module and the options pgflow applies to it.
type stepState struct {
	def           *flowfile.Step
	module        sandbox.Module
	timeout       time.Duration // effective: the step's, else the flow's (as stored in pgflow)
	baseDelay     int           // effective, seconds: retries wait floor(base_delay * 2^attempts)
	maxAttempts   int           // effective: the attempt that fails the task for good
	hasDependents bool
	metrics       *stepMetrics      // nil without metrics
	sql           *sqlsession.Grant // the step's sql section; nil: no SQL
	ctxShape      []byte            // the context's step_type and depends_on members (stepShape)
	// maxDependentStartDelay is the longest start_delay among dependent steps, in seconds:
	// their messages appear that long after this step completes.
	maxDependentStartDelay int
	// claimable are the dependent steps this worker serves whose messages are visible at
	// once (no start_delay): its completions' transactions start them (claim.go).
	claimable []string
}

// New loads and validates every step's module. It does not touch the database.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if cfg.Flows == nil || cfg.Pool == nil || cfg.Engine == nil {
		return nil, errors.New("host.New: Flows, Pool and Engine are required")
	}
	w := &Worker{cfg: cfg, log: cfg.Log, byFlow: map[string]*flowState{}, byWorker: map[string]*flowState{}, stop: make(chan struct{})}
	w.upgrade.checkNow = make(chan struct{}, 1)
	w.global = &slots{max: cfg.Concurrency, onFree: w.wakeStarved}
	w.runCtx, w.cancelRun = context.WithCancel(context.Background())
	for _, fl := range cfg.Flows.Flows {
		fs := &flowState{def: fl, workerID: kit.NewUUID(), steps: map[string]*stepState{}}
		if cfg.Metrics != nil {
			fs.inFlight = cfg.Metrics.InFlight.WithLabelValues(fl.Slug)
		}
		if fl.MaxConcurrency > 0 {
			fs.slots = &slots{max: fl.MaxConcurrency, onFree: fs.ring}
		}
		for _, s := range fl.Served() {
			mod, err := step.Load(ctx, cfg.Engine, cfg.Flows, fl, s, cfg.Metrics, cfg.Log)
			if err != nil {
				w.closeModules(ctx)
				return nil, fmt.Errorf("%s:%d: flow %q step %q: %w", cfg.Flows.Path, s.ModuleLine, fl.Slug, s.Slug, err)
			}
			st := &stepState{def: s, module: mod, metrics: newStepMetrics(cfg.Metrics, fl.Slug, s.Slug, s.Slug == runMarkStep(fl)),
				sql: w.sqlGrant(cfg.Flows, fl, s), ctxShape: step.Shape(s)}
			for _, dep := range fl.Dependents(s.Slug) {
				st.hasDependents = true
				d := fl.Step(dep)
				if d.StartDelay != nil {
					st.maxDependentStartDelay = max(st.maxDependentStartDelay, *d.StartDelay)
				}
				if !d.External && (d.StartDelay == nil || *d.StartDelay == 0) {
					st.claimable = append(st.claimable, dep)
				}
			}
			fs.steps[s.Slug] = st
		}
		w.flows = append(w.flows, fs)
		w.byFlow[fl.Slug] = fs
		w.byWorker[fs.workerID] = fs
	}
	if cfg.FetchLeases >= 0 { // 0: automatic, one lease per queue once another worker reads it (leases.go)
		w.leases = fetchlease.New(fetchlease.Config{Pool: cfg.Pool, Slots: max(cfg.FetchLeases, 1), Log: w.log})
	}
	w.done = completer.New(cfg.Pool, completer.Config{MaxBatch: cfg.CompletionBatch, Writers: cfg.CompletionWriters,
		OnWritten: w.onWritten, Log: w.log, Claim: w.claimSuccessors,
		OnError: func(err error) {
			w.dbError("write outcomes", err)
			w.pgflowSuspect(err)
		}})
	return w, nil
}

// WorkerIDs returns the pgflow.workers id this worker registers for each flow.
func (w *Worker) WorkerIDs() map[string]string {
	out := map[string]string{}
	for _, fs := range w.flows {
		out[fs.def.Slug] = fs.workerID
	}
	return out
}

// ModuleInfo describes the module a served step runs, as loaded (path, sha256, ABI version).
func (w *Worker) ModuleInfo(flow, step string) (sandbox.Info, bool) {
	fs := w.byFlow[flow]
	if fs == nil || fs.steps[step] == nil {
		return sandbox.Info{}, false
	}
	return fs.steps[step].module.Info(), true
}

// moduleSources lists the files the steps' modules were made from beyond the module files
// themselves (a TypeScript handler's imports): a change to one is a change to its step.
func (w *Worker) moduleSources() []string {
	var out []string
	for _, fs := range w.flows {
		for _, st := range fs.steps {
			out = append(out, step.Sources(st.module)...)
		}
	}
	return out
}

// Start serves the flows in the background and returns once the worker takes tasks
// (Started), or with the reason it could not start (nothing keeps running then). The flows
// must have been compiled into the database (package compile). The worker serves until Stop
// or Drain, or until every flow is deprecated or abandoned calls pile up (Err says which);
// ctx bounds the start only.
func (w *Worker) Start(ctx context.Context) error {
	if w.launched.Swap(true) {
		return errors.New("the worker was started already")
	}
	go func() { w.EndWith(w.run(context.WithoutCancel(ctx))) }()
	select {
	case <-w.Started():
		return nil
	case <-w.Stopped():
		return w.Err()
	case <-ctx.Done():
		w.Drain()
		<-w.Stopped()
		return ctx.Err()
	}
}

// Drain begins a graceful stop without waiting for it: no new tasks, running ones finish
// (up to the drain timeout), then the worker rows are marked stopped. Stopped is closed
// once it has ended.
func (w *Worker) Drain() { w.stopOnce.Do(func() { close(w.stop) }) }

// Stop drains the worker and returns once it has ended. Err (service.State) is then why it
// ended: nil after Stop or Drain, ErrRestart when abandoned calls piled up, or the error
// that kept it from serving.
func (w *Worker) Stop() {
	w.Drain()
	<-w.Stopped()
}

// run serves until Drain (or every flow is deprecated), then shuts down gracefully and
// returns nil; ErrRestart when abandoned calls piled up.
//
// Serving is a group of services (package service) started in this order and stopped in the
// reverse: the heartbeat (the worker rows exist before any task names them, and are marked
// stopped last), the requeue guard, the recovery sweep, the completer (it writes what the
// drain finished before the rows are marked stopped), the notify listener; then the fetch
// group: the fetch leases and one fetch loop per queue, stopped before the drain.
func (w *Worker) run(ctx context.Context) error {
	defer w.closeModules(context.WithoutCancel(ctx))
	// The fingerprint and the newest migration first: a change after them is then seen by
	// the first check, or refused by the first fetch.
	catalogue, err := schema.CatalogueFingerprint(ctx, w.cfg.Pool)
	if err != nil {
		return err
	}
	w.upgrade.catalogue = catalogue
	w.upgrade.newest, w.upgrade.release = schema.NewestMigration(ctx, w.cfg.Pool)
	proto, err := checkSchema(ctx, w.cfg.Pool)
	if err != nil {
		return err
	}
	w.proto.Store(&proto)
	if err := w.checkSQLRoles(ctx); err != nil {
		return err
	}
	w.keepAttemptHistory(ctx)
	if err := w.loadEffectiveOptions(ctx); err != nil {
		return err
	}
	listen, err := w.prepareSignal(ctx)
	if err != nil {
		return err
	}
	w.registerProcess(ctx)
	var services service.Group
	if err := services.Start(ctx, w.services(listen)...); err != nil {
		return err
	}
	w.cfg.Health.SetDatabase(true)
	w.cfg.Metrics.SetQueueSource(w, w.queueBacklogs)
	defer w.cfg.Metrics.ClearQueueSource(w)

	var fetching service.Group
	if err := fetching.Start(ctx, w.fetchServices(listen)...); err != nil {
		services.Stop()
		return err
	}
	w.cfg.Health.SetStarted()
	w.SetStarted()
	for _, fs := range w.flows {
		w.log.Info("serving flow", "flow", fs.def.Slug, "worker_id", fs.workerID)
	}
	w.log.Info("worker started", "flows", len(w.flows), "concurrency", w.cfg.Concurrency,
		"signal", string(w.cfg.Signal), "engine", w.cfg.Engine.Name())

	<-w.stop
	w.log.Info("stopping: draining running tasks", "drain_timeout", w.cfg.DrainTimeout)
	w.cfg.Health.SetDraining()
	fetching.Stop()    // the loops end, then the leases go: other workers read what is left
	w.claimGate.Lock() // claims in flight launch their tasks first
	w.noClaims = true
	w.claimGate.Unlock()
	w.drain()
	w.stopLateServices()
	services.Stop()
	w.log.Info("worker stopped")
	if w.restart.Load() {
		return ErrRestart
	}
	return nil
}

// fetchServices are the parts that take tasks, in the order they start: the fetch leases
// (released last, once no loop reads) and one fetch loop per queue.
func (w *Worker) fetchServices(listen *poller.Listener) []service.Service {
	var out []service.Service
	if w.leases != nil {
		leases := w.leases
		out = append(out, &service.Func{OnStop: func() { leases.Close(context.Background()) }})
	}
	for _, fs := range w.flows {
		for _, q := range fs.queues {
			out = append(out, service.NewLoop(func(ctx context.Context) { w.queueLoop(ctx, q, listen) }))
		}
	}
	return out
}

// services are the worker's background parts, in the order they start.
func (w *Worker) services(listen *poller.Listener) []service.Service {
	rows := make([]heartbeat.Row, len(w.flows))
	for i, fs := range w.flows {
		rows[i] = heartbeat.Row{WorkerID: fs.workerID, Queue: fs.def.Slug}
	}
	proto := w.pgflow()
	w.upgrade.heartbeat = heartbeat.New(heartbeat.Config{Pool: w.cfg.Pool, Rows: rows, Interval: w.cfg.HeartbeatInterval,
		StoppedAt: proto.StoppedAt, ProcessMode: proto.StartModes, Log: w.log, Health: w.cfg.Health, OnDeprecated: w.deprecated})
	out := []service.Service{w.upgrade.heartbeat}
	if g := w.requeueGuard(proto); g != nil {
		out = append(out, g)
	}
	out = append(out, service.NewLoop(w.recoveryLoop), service.NewLoop(w.cancelWatch), w.done, service.NewLoop(w.pgflowWatch))
	if w.processKnown {
		out = append(out, service.NewLoop(w.drainWatch))
	}
	if s := w.scheduler(); s != nil {
		out = append(out, s)
	}
	if listen != nil {
		out = append(out, service.NewLoop(listen.Run))
	}
	return out
}

// dbError counts a statement the database refused, by operation, class and SQLSTATE.
func (w *Worker) dbError(op string, err error) {
	m := w.cfg.Metrics
	if m == nil {
		return
	}
	m.DBErrors.WithLabelValues(op, dberr.Classify(err).String(), dberr.SQLState(err)).Inc()
	m.Unwritten.Set(float64(w.done.Pending()))
}

// queueBacklogs reads the backlog of the queues this worker serves, for the metrics.
func (w *Worker) queueBacklogs(ctx context.Context) ([]telemetry.QueueStat, error) {
	var names []string
	for _, fs := range w.flows {
		for _, q := range fs.queues {
			if !slices.Contains(names, q.name) {
				names = append(names, q.name)
			}
		}
	}
	got, err := store.QueueBacklogs(ctx, w.cfg.Pool, names)
	if err != nil {
		w.dbError("queue backlog", err)
		return nil, err
	}
	out := make([]telemetry.QueueStat, len(got))
	for i, b := range got {
		out[i] = telemetry.QueueStat{Queue: b.Queue, Visible: b.Visible, OldestAge: b.OldestAge}
	}
	return out, nil
}

// scheduler starts the runs of the flows with a schedule; nil when none has one.
func (w *Worker) scheduler() *schedule.Scheduler {
	var flows []schedule.Flow
	for _, fs := range w.flows {
		if fs.def.Schedule != nil {
			flows = append(flows, schedule.Flow{Slug: fs.def.Slug, Spec: fs.def.Schedule, WorkerID: fs.workerID})
		}
	}
	if len(flows) == 0 {
		return nil
	}
	return schedule.New(schedule.Config{Pool: w.cfg.Pool, Flows: flows, Log: w.log,
		StartRun: func(ctx context.Context, tx pgx.Tx, flow string, input json.RawMessage) (string, error) {
			return store.Start(ctx, tx, flow, input)
		},
		OnTick: func(flow string, r schedule.TickResult) {
			if m := w.cfg.Metrics; m != nil {
				if r == schedule.TickMissed {
					m.ScheduleMissed.WithLabelValues(flow).Inc()
				} else {
					m.ScheduleTicks.WithLabelValues(flow, string(r)).Inc()
				}
			}
		}})
}

// deprecated stops fetching a flow whose worker row an operator deprecated, and the whole
// worker once every flow is.
func (w *Worker) deprecated(workerID string) {
	fs := w.byWorker[workerID]
	if fs == nil || fs.deprecated.Swap(true) {
		return
	}
	w.log.Info("flow deprecated for this worker: no new tasks; running ones finish", "flow", fs.def.Slug, "worker_id", workerID)
	if w.allDeprecated() {
		w.log.Info("every flow of this worker is deprecated: stopping")
		w.Drain()
	}
}

// keepAttemptHistory creates pgflow_wasm.task_attempts when missing and makes every failure
// write keep its attempt there; a role that may not create it costs the history only.
func (w *Worker) keepAttemptHistory(ctx context.Context) {
	if w.cfg.AttemptHistory < 0 {
		return
	}
	if err := schema.EnsureAttemptHistory(ctx, w.cfg.Pool); err != nil {
		w.log.Warn("failed attempts are not kept (pgflow keeps only a task's last error): cannot create pgflow_wasm.task_attempts",
			"error", err, "fix", "run `pgflow-wasm db install` once as a role that may create schema pgflow_wasm")
		return
	}
	w.history = true
	w.done.KeepAttemptHistory()
}

// drain waits for running tasks up to the drain timeout; then it cancels the rest, whose
// outcomes become failures that pgflow retries (on this or another worker).
func (w *Worker) drain() {
	finished := make(chan struct{})
	go func() { w.running.Wait(); close(finished) }()
	select {
	case <-finished:
		return
	case <-time.After(w.cfg.DrainTimeout):
	}
	w.log.Warn("drain timeout: stopping the tasks still running; each is failed with a message saying so, and pgflow retries those with attempts left",
		"drain_timeout", w.cfg.DrainTimeout)
	w.cancelRun()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		w.log.Error("tasks did not stop after cancellation; exiting without them (recovery will requeue them)")
	}
}

func (w *Worker) closeModules(ctx context.Context) {
	w.closeSQLPools()
	for _, fs := range w.flows {
		for _, st := range fs.steps {
			if st.module != nil {
				_ = st.module.Close(ctx)
			}
		}
	}
}

// wakeStarved makes every fetch loop that found no free slot poll again.
func (w *Worker) wakeStarved() {
	for _, fs := range w.flows {
		for _, q := range fs.queues {
			if q.starved.Load() {
				q.wake.Ring()
			}
		}
	}
}

// stepMetrics are one step's metric series, looked up once: label lookups per task cost.
type stepMetrics struct {
	started, completed, fuel prometheus.Counter
	duration, queueWait      prometheus.Observer
	// runStarted counts a run when the step's task 0 starts its first attempt: the step is
	// its flow's runMarkStep. nil for the other steps.
	runStarted prometheus.Counter
}

func newStepMetrics(m *telemetry.Metrics, flow, step string, marksRun bool) *stepMetrics {
	if m == nil {
		return nil
	}
	sm := &stepMetrics{
		started:   m.TasksStarted.WithLabelValues(flow, step),
		completed: m.TasksCompleted.WithLabelValues(flow, step),
		duration:  m.TaskDuration.WithLabelValues(flow, step),
		fuel:      m.FuelUsed.WithLabelValues(flow, step),
		queueWait: m.QueueWait.WithLabelValues(flow),
	}
	if marksRun {
		sm.runStarted = m.RunsStarted.WithLabelValues(flow)
	}
	return sm
}

// runMarkStep is the step whose first task marks a run as started for the metrics: the
// first root single step in the flows file (it has exactly one task in every run), else the
// first root map step (a run that maps an empty array is then not counted). Every worker
// picks the same one, so each run is counted once, by the worker that starts that task.
func runMarkStep(fl *flowfile.Flow) string {
	mark := ""
	for _, s := range fl.Steps {
		if len(s.DependsOn) > 0 {
			continue
		}
		if s.Type != flowfile.StepMap {
			return s.Slug
		}
		if mark == "" {
			mark = s.Slug
		}
	}
	return mark
}
