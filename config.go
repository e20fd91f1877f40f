package pgflowwasm

import (
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Config configures a Client. Zero values take the defaults of DefaultConfig.
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
	// FetchLeases is how many workers read one queue at a time; the others leave it to them
	// until a holder's handlers are the limit or its queue is empty. 0 is automatic: one, once
	// two or more live workers serve the queue's flow. Negative: every worker reads.
	FetchLeases int
}

// DefaultConfig is the configuration a zero Config stands for: every default in one place
// (the worker's), which the command's flags show too.
func DefaultConfig() Config {
	d := worker.Config{}.WithDefaults()
	return Config{
		WatchInterval:       worker.DefaultWatchInterval,
		Engine:              sandbox.EngineWazero,
		Concurrency:         d.Concurrency,
		BatchSize:           d.BatchSize,
		Signal:              d.Signal,
		MinPollInterval:     d.MinPollInterval,
		MaxPollInterval:     d.MaxPollInterval,
		NotifyFallback:      d.NotifyFallback,
		HeartbeatInterval:   d.HeartbeatInterval,
		WorkerStaleAfter:    d.WorkerStaleAfter,
		LivenessGrace:       d.LivenessGrace,
		RecoveryInterval:    d.RecoveryInterval,
		StalledMargin:       d.StalledMargin,
		ForeignStaleAfter:   d.ForeignStaleAfter,
		PgflowCheckInterval: d.PgflowCheckInterval,
		DrainTimeout:        d.DrainTimeout,
		AttemptHistory:      d.AttemptHistory,
		CompletionBatch:     d.CompletionBatch,
		CompletionWriters:   d.CompletionWriters,
		FetchLeases:         d.FetchLeases,
	}
}
