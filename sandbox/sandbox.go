// Package sandbox runs pgflow step handlers compiled to WebAssembly with hard limits.
//
// One Engine interface, two implementations: wazero (default, pure Go) and wasmtime-go
// (build tag "wasmtime", cgo). An engine loads a module file (size cap, sha256, compile with an
// on-disk cache, validation of imports, exports and memory) and runs it once per task in a
// fresh instance, through ABI v1 (see ../abi/SPEC.md).
package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/sqlcap"
)

// Engine compiles and runs modules. Implementations are safe for concurrent use.
type Engine interface {
	// Name is "wazero" or "wasmtime".
	Name() string
	// Load reads, validates and compiles the module at path. A module that would be
	// rejected returns an *Error of KindInvalidModule that says why.
	Load(ctx context.Context, path string, mc ModuleConfig) (Module, error)
	// LoadBytes is Load for a module made in memory (a JavaScript handler's snapshot):
	// the same size cap, validation, compile, limits and capabilities. name stands for
	// the path in Info and messages.
	LoadBytes(ctx context.Context, name string, wasm []byte, mc ModuleConfig) (Module, error)
	// Abandoned counts calls whose guest code still runs past its deadline + WatchdogGrace.
	// Both engines stop every known guest well before that (docs/sandbox.md), so it stays
	// 0; the worker restarts itself when such calls pile up anyway.
	Abandoned() int
	// Close releases every module and instance of the engine.
	Close(ctx context.Context) error
}

// Module is a compiled, validated handler. Run may be called concurrently.
type Module interface {
	Info() Info
	// Run executes one task. On failure it returns an *Error; the Result still carries
	// the logs the guest wrote before failing.
	Run(ctx context.Context, t Task) (Result, error)
	Close(ctx context.Context) error
}

// Config applies to every module an engine loads. Zero values take the defaults below.
type Config struct {
	CacheDir       string // on-disk compilation cache; "" disables it
	MaxModuleBytes int64  // largest module file accepted
	MaxOutputBytes int    // largest output_write accepted
	MaxErrorBytes  int    // error_write and captured stdout and stderr are truncated here
	MaxLogBytes    int    // per task; further log lines are dropped and counted
	MaxInputBytes  int    // largest Task.Input; a larger one fails with KindInputTooLarge
	// LoadTimeout bounds the calls Load makes into a module (start function, _initialize,
	// pgflow_abi_version).
	LoadTimeout time.Duration
	// WatchdogGrace is how long after a task's deadline Run waits for the engine to stop
	// the guest before it returns a timeout anyway and abandons the call (see Abandoned).
	WatchdogGrace time.Duration
	// Limits on what Load accepts, so compiling cannot take unbounded time and memory:
	// functions a module defines, bytes of one function body, and how long compiling may
	// take (a compile still running then is left to finish in the background, its
	// result thrown away).
	MaxFunctions     int
	MaxFunctionBytes int
	CompileTimeout   time.Duration
	// Uninstrumented runs wazero as it was before modules were instrumented: only loops
	// check the deadline (WithCloseOnContextDone), so loop-free code runs on, abandoned,
	// and can hold the Go runtime. Only for measuring what the instrumentation costs and for
	// testing the worker's last resort against abandoned calls; never for serving.
	Uninstrumented bool
}

// Defaults for Config and ModuleConfig.
const (
	DefaultMaxModuleBytes = 64 << 20
	DefaultMaxOutputBytes = 1 << 20
	DefaultMaxErrorBytes  = 16 << 10
	DefaultMaxLogBytes    = 64 << 10
	DefaultMaxInputBytes  = 16 << 20
	DefaultMemoryLimit    = 64 << 20
	DefaultTimeout        = 60 * time.Second
	DefaultLoadTimeout    = 10 * time.Second
	DefaultWatchdogGrace  = time.Second
	// The largest example modules (standard Go) define about 2,150 functions, the largest
	// body among all examples is under 30 KiB (docs/sandbox.md, "Limits and defaults").
	DefaultMaxFunctions     = 100_000
	DefaultMaxFunctionBytes = 1 << 20
	DefaultCompileTimeout   = 3 * time.Minute
)

// ModuleConfig holds the per-step settings of a loaded module.
type ModuleConfig struct {
	MemoryLimit   uint64 // bytes of linear memory; rounded down to 64 KiB pages
	ReuseInstance bool   // keep instances between tasks (opt-in: tasks may then see each other's memory)
	// Capabilities grant outbound HTTP and named values (flows.yaml `http` and `env`);
	// the zero value grants nothing.
	Capabilities Capabilities
	// Fuel is the work one task may do, in units of about one WebAssembly instruction
	// (flows.yaml `fuel`); past it the task fails with KindFuelExhausted. 0: unlimited.
	Fuel int64
}

// Task is one handler call.
type Task struct {
	Input   []byte        // step input JSON, exactly as pgflow delivered it
	Context []byte        // context JSON (abi.Context)
	Timeout time.Duration // the step timeout; the call is stopped when it expires
	// Seed makes random_get reproducible: a task with the same seed draws the same bytes
	// (flows.yaml `deterministic: true` seeds it with the task's identity). nil: every task
	// draws unpredictable bytes.
	Seed []byte
	// FixedClock gives the guest fake clocks instead of the host's (flows.yaml
	// `deterministic: true`): realtime starts at 2022-01-01T00:00:00Z, monotonic at 0, every
	// reading advances them by 1 ms, and sleeps return at once, moving them forward. false:
	// realtime is the wall clock, monotonic counts from the worker's start, sleeps wait.
	FixedClock bool
	// SQL runs the task's sql_query calls: the step's role, on its database, within the
	// task's transaction when the step is transactional. nil: every call is denied.
	SQL sqlcap.Session
}

// Result is what a call produced.
type Result struct {
	Output      []byte // valid UTF-8 JSON, at most MaxOutputBytes
	Logs        []LogLine
	LogsDropped int // lines dropped over MaxLogBytes
	Duration    time.Duration
	// FuelUsed is the work the task did, in fuel units: always counted on wazero, on
	// wasmtime only for modules loaded with Fuel (0 otherwise).
	FuelUsed int64
}

// LogLine is one call of the guest's log import.
type LogLine struct {
	Level   int32 // abi.LogDebug .. abi.LogError
	Message string
}

// Kind classifies a failure so the worker can report it and tests can assert on it.
type Kind string

// Failure kinds. Load-time problems are KindInvalidModule; the others come from Run.
const (
	KindInvalidModule  Kind = "invalid_module"
	KindTimeout        Kind = "timeout"
	KindTrap           Kind = "trap"
	KindHandlerError   Kind = "handler_error"
	KindOutputTooLarge Kind = "output_too_large"
	KindInvalidOutput  Kind = "invalid_output"
	KindMemoryLimit    Kind = "memory_limit"
	KindProtocolError  Kind = "protocol_error"
	// KindCanceled: the caller's context was canceled (not its deadline) before the call ended.
	KindCanceled Kind = "canceled"
	// KindInputTooLarge: the task's input is over Config.MaxInputBytes; the guest never ran.
	KindInputTooLarge Kind = "input_too_large"
	// KindFuelExhausted: the task used more work than its step's fuel (ModuleConfig.Fuel).
	KindFuelExhausted Kind = "fuel_exhausted"
	// KindSQL: the task's SQL session ended it (a result over the step's limits, a role a
	// statement changed, the transaction's connection lost): sqlcap.Abort.
	KindSQL Kind = "sql"
)

// Error is the typed failure of Load or Run.
type Error struct {
	Kind    Kind
	Message string // what happened, including the guest's own message when it left one
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Kind, e.Message) }

// Info describes a module file.
type Info struct {
	Path           string
	Size           int64
	SHA256         string // hex
	Mode           string // "reactor" (pgflow_handle) or "command" (_start)
	ABIVersion     int32  // 0 when the module does not export pgflow_abi_version
	Imports        []Func
	Exports        []Func
	MemoryMinPages uint32
	MemoryMaxPages uint32 // 0 when the module declares no maximum
	// Compilation says how the engine compiled the module (engine, instrumentation, fuel
	// metering): two loads with equal Compilation and SHA256 run the same code. Empty
	// from Inspect, which compiles nothing.
	Compilation string
}

// Func is one import or export, with its signature in WebAssembly text form, e.g.
// "(i32, i32) -> i32"; memories, tables, globals and tags show their kind instead.
type Func struct {
	Module    string `json:"module,omitempty"` // import module; empty for exports
	Name      string `json:"name"`
	Signature string `json:"signature"`
}
