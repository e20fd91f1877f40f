package pgflowwasm

import (
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/retention"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Config configures a Client. Zero values take the XxxDefault constants (WithDefaults).
type Config struct {
	// FlowsPath is a flows.yaml: served, and while the client runs, reloaded when it or a
	// module it names changes (WatchInterval) or Reload rings. Or Flows: a file built in Go
	// (flowfile.Parse) or loaded already, served as it is. Exactly one of the two.
	FlowsPath string
	Flows     *flowfile.File
	// WatchInterval is how often the flows file and its modules are looked at; negative:
	// never (Reload still reloads).
	WatchInterval time.Duration
	// Reload asks for a reload now (the command sends SIGHUP here).
	Reload <-chan os.Signal
	// KeepDatabaseOptions leaves flow and step options (attempts, delays, timeouts) as the
	// database has them when the file's differ, logging the difference; by default the
	// file's options are written at start and at every reload (the shape is never changed:
	// a flow whose steps differ is refused).
	KeepDatabaseOptions bool

	// Engine is sandbox.EngineWazero (pure Go, the default) or sandbox.EngineWasmtime
	// (a binary built with -tags wasmtime). Sandbox sets its limits and compilation cache
	// (zero: the defaults, and no cache; sandbox.DefaultCacheDir() is the command's).
	Engine  string
	Sandbox sandbox.Config

	Logger *slog.Logger // nil: nothing is logged
	// MetricsRegisterer receives the worker's Prometheus metrics; nil: a registry of the
	// client's own, served by MetricsHandler.
	MetricsRegisterer prometheus.Registerer
	Hooks             pgflowtype.Hooks
	// ExitOnRestart: when handler calls the sandbox had to abandon pile up, stop and make
	// Wait return ErrRestart (the command then executes itself afresh, which reclaims
	// them); by default the client serves on at once on a fresh engine.
	ExitOnRestart bool

	Concurrency int // handlers running at once across all flows
	BatchSize   int // messages read per poll

	Signal          pgflowtype.Signal
	MinPollInterval time.Duration // polling: shortest wait between polls of an idle queue
	MaxPollInterval time.Duration // polling: longest wait
	NotifyFallback  time.Duration // notify: poll this often anyway (retries send no notification)

	HeartbeatInterval time.Duration // how often the worker rows are touched
	WorkerStaleAfter  time.Duration // recovery: a pgflow-wasm worker silent this long is dead
	LivenessGrace     time.Duration // recovery: a worker whose liveness lock is gone this long is dead
	RecoveryInterval  time.Duration // recovery: how often stalled tasks are looked for
	StalledMargin     time.Duration // recovery: added to a step's timeout before its task is stalled
	// ForeignStaleAfter: tasks of workers of other kinds (pgflow's own) are recovered once
	// their heartbeat is this old; negative never.
	ForeignStaleAfter time.Duration
	// PgflowCheckInterval: how often the worker looks whether pgflow was upgraded under it
	// (errors that say so, and a fetch after a `db install` migration, make it look at once);
	// negative: only those.
	PgflowCheckInterval time.Duration

	DrainTimeout      time.Duration // Stop: how long running tasks may finish
	AttemptHistory    time.Duration // how long failed attempts are kept; negative keeps none
	CompletionBatch   int           // outcomes written per transaction
	CompletionWriters int           // outcome-writing transactions in flight at once
	// PruneOlderThan, when positive, makes the client delete finished runs older than this
	// every PruneInterval (as Prune does; one process of a database at a time), the first
	// turn a minute after Start.
	PruneOlderThan time.Duration
	PruneInterval  time.Duration
	// FetchLeases is how many workers read one queue at a time; the others leave it to them
	// until a holder's handlers are the limit or its queue is empty. 0 is automatic: one, once
	// two or more live workers serve the queue's flow. Negative: every worker reads.
	FetchLeases int
}

// The defaults a zero Config field takes (Config.WithDefaults), named as River names its own.
const (
	WatchIntervalDefault       = worker.DefaultWatchInterval
	EngineDefault              = sandbox.EngineWazero
	ConcurrencyDefault         = worker.DefaultConcurrency
	BatchSizeDefault           = worker.DefaultBatchSize
	SignalDefault              = worker.DefaultSignal
	MinPollIntervalDefault     = worker.DefaultMinPollInterval
	MaxPollIntervalDefault     = worker.DefaultMaxPollInterval
	NotifyFallbackDefault      = worker.DefaultNotifyFallback
	HeartbeatIntervalDefault   = worker.DefaultHeartbeatInterval
	WorkerStaleAfterDefault    = worker.DefaultWorkerStaleAfter
	LivenessGraceDefault       = worker.DefaultLivenessGrace
	RecoveryIntervalDefault    = worker.DefaultRecoveryInterval
	StalledMarginDefault       = worker.DefaultStalledMargin
	ForeignStaleAfterDefault   = worker.DefaultForeignStaleAfter
	PgflowCheckIntervalDefault = worker.DefaultPgflowCheckInterval
	DrainTimeoutDefault        = worker.DefaultDrainTimeout
	AttemptHistoryDefault      = worker.DefaultAttemptHistory
	CompletionBatchDefault     = worker.DefaultCompletionBatch
	CompletionWritersDefault   = worker.DefaultCompletionWriters
	FetchLeasesDefault         = worker.DefaultFetchLeases
	PruneIntervalDefault       = retention.DefaultInterval
)

// WithDefaults returns the config with every unset field at its XxxDefault. A negative
// duration keeps its meaning where the field gives one (never, none).
func (c Config) WithDefaults() Config {
	dur := func(d *time.Duration, v time.Duration, negativeMeans bool) {
		if *d == 0 || (*d < 0 && !negativeMeans) {
			*d = v
		}
	}
	num := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	dur(&c.WatchInterval, WatchIntervalDefault, true)
	if c.Engine == "" {
		c.Engine = EngineDefault
	}
	num(&c.Concurrency, ConcurrencyDefault)
	num(&c.BatchSize, BatchSizeDefault)
	if c.Signal == "" {
		c.Signal = SignalDefault
	}
	dur(&c.MinPollInterval, MinPollIntervalDefault, false)
	dur(&c.MaxPollInterval, MaxPollIntervalDefault, false)
	dur(&c.NotifyFallback, NotifyFallbackDefault, false)
	dur(&c.HeartbeatInterval, HeartbeatIntervalDefault, false)
	dur(&c.WorkerStaleAfter, WorkerStaleAfterDefault, false)
	dur(&c.LivenessGrace, LivenessGraceDefault, false)
	dur(&c.RecoveryInterval, RecoveryIntervalDefault, false)
	dur(&c.StalledMargin, StalledMarginDefault, false)
	dur(&c.ForeignStaleAfter, ForeignStaleAfterDefault, true)
	dur(&c.PgflowCheckInterval, PgflowCheckIntervalDefault, true)
	dur(&c.DrainTimeout, DrainTimeoutDefault, false)
	dur(&c.AttemptHistory, AttemptHistoryDefault, true)
	num(&c.CompletionBatch, CompletionBatchDefault)
	num(&c.CompletionWriters, CompletionWritersDefault)
	dur(&c.PruneInterval, PruneIntervalDefault, false)
	// FetchLeases: 0 is its default (automatic) and negative has a meaning: kept as given.
	return c
}

// DefaultConfig is the configuration a zero Config stands for, which the command's flags
// show too.
func DefaultConfig() Config { return Config{}.WithDefaults() }
