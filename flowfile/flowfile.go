// Package flowfile loads and validates flows.yaml: the flows a worker serves, their steps,
// dependencies, options and the handler of each step (a WebAssembly module, or a TypeScript or
// JavaScript file).
//
// Loading is strict: unknown keys, wrong types, bad slugs, missing dependencies, cycles and
// out-of-range options are errors, each naming the file and line and what to write instead.
// Module files must exist; whether they are valid WebAssembly handlers is the sandbox's call.
package flowfile

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Defaults for flow options. They are always sent to pgflow.create_flow explicitly,
// because the SQL function's own base_delay default (5) disagrees with the table's (1).
const (
	DefaultMaxAttempts = 3
	DefaultBaseDelay   = 1
	DefaultTimeout     = 60
)

// Step types.
const (
	StepSingle = "single"
	StepMap    = "map"
)

// File is a loaded, validated flows.yaml.
type File struct {
	Path  string // as given to Load
	Flows []*Flow
	// WithoutFlowsFile: Path is a folder of @pgflow/dsl flow files or one such file, served
	// as the files say with no capability (no flows.yaml grants one).
	WithoutFlowsFile bool
}

// Flow is one pgflow flow.
type Flow struct {
	Slug        string
	MaxAttempts int
	BaseDelay   int // seconds; the first retry waits 2 x base_delay
	Timeout     int // seconds; the default for steps without their own
	// MaxConcurrency caps this flow's tasks running at once in one worker; 0 means only
	// the worker's global limit applies.
	MaxConcurrency int
	// Schedule starts runs on a cron schedule (nil: none); ScheduleLine is where it is.
	Schedule     *Schedule
	ScheduleLine int
	Steps        []*Step // in file order, which is a valid topological order
	Line         int
	// FlowFile is the @pgflow/dsl flow file the flow was read from (a `- flow:` entry), ""
	// for a flow declared in flows.yaml.
	FlowFile string
}

// Step is one step of a flow.
type Step struct {
	Slug      string
	Type      string // StepSingle or StepMap
	DependsOn []string
	// Module is the handler's path: absolute, resolved against the flows file's folder; a
	// WebAssembly module, or a TypeScript or JavaScript file the worker bundles (sandbox/jshandler).
	Module     string
	ModuleLine int
	// FlowsDir is the flows file's folder: a TypeScript or JavaScript handler in it may
	// import the folder's files and nothing outside it (sandbox/jshandler, ProjectRoot).
	FlowsDir string
	// Step options; nil inherits the flow's value (stored as NULL in pgflow.steps).
	MaxAttempts *int
	BaseDelay   *int
	Timeout     *int
	StartDelay  *int
	// MemoryLimit is the handler's linear-memory cap in bytes; 0 means the sandbox default.
	MemoryLimit uint64
	// ReuseInstance keeps handler instances between tasks (for heavy guests such as
	// standard Go); tasks may then see memory left by earlier tasks of the same step.
	ReuseInstance bool
	// Fuel is the work one task may do, in units of about one WebAssembly instruction;
	// 0 means unlimited (the timeout still applies).
	Fuel int64
	// Deterministic seeds the handler's random bytes with the task's identity, so a task
	// (a retry included) draws the same bytes every time; otherwise they are unpredictable.
	Deterministic bool
	// HTTP is the outbound HTTP the handler may make: the step's `http`, else its flow's;
	// nil allows none.
	HTTP *HTTP
	// Env lists the worker environment variables the handler may read by name (config_get):
	// the step's `env`, else its flow's. Only names: values are read by the worker.
	Env []string
	// SQL is what SQL the handler may run (sql_query): the step's `sql`, else its flow's;
	// nil allows none.
	SQL *SQL
	// Conditions (pgflow 0.14; conditions.go). If and IfNot are JSON objects, nil when unset;
	// WhenUnmet and WhenExhausted are "" when unset (pgflow's defaults: skip, fail).
	// External: another worker (pgflow's own TypeScript worker, say) serves this step; it
	// has no module here. A flow with external steps needs per-step queues (pgflow 0.17+),
	// so each side reads only its own steps' tasks.
	External bool
	// FlowFile: Module is a @pgflow/dsl flow file, and the step's handler is the inline one
	// the file's flow gives the step (jshandler.LoadFlowFile).
	FlowFile bool

	If, IfNot     json.RawMessage
	WhenUnmet     string
	WhenExhausted string
	Line          int
}

// EffectiveTimeout is the step's timeout in seconds, falling back to the flow's.
func (s *Step) EffectiveTimeout(f *Flow) int {
	if s.Timeout != nil {
		return *s.Timeout
	}
	return f.Timeout
}

// Flow returns the flow with the given slug, or nil.
func (f *File) Flow(slug string) *Flow {
	for _, fl := range f.Flows {
		if fl.Slug == slug {
			return fl
		}
	}
	return nil
}

// Step returns the step with the given slug, or nil.
func (f *Flow) Step(slug string) *Step {
	for _, s := range f.Steps {
		if s.Slug == slug {
			return s
		}
	}
	return nil
}

// Dependents returns the slugs of the steps that depend on step.
func (f *Flow) Dependents(step string) []string {
	var out []string
	for _, s := range f.Steps {
		for _, d := range s.DependsOn {
			if d == step {
				out = append(out, s.Slug)
			}
		}
	}
	return out
}

// Load reads and validates the flows file at path. A folder, or a .ts, .mts, .js or .mjs
// file, is served without a flows file: every Flow of @pgflow/dsl the folder's files (or the
// file) export, as the files say, with no capability.
func Load(path string) (*File, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return loadFlowFiles(path, true)
	}
	if IsFlowSource(path) {
		if _, err := os.Stat(path); err != nil {
			return nil, Errors{{File: path, Msg: err.Error()}}
		}
		return loadFlowFiles(path, false)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, Errors{{File: path, Msg: "file not found (pass --flows FILE, or a folder of @pgflow/dsl flow files such as supabase/functions/_flows, or create flows.yaml: see README)"}}
		}
		return nil, Errors{{File: path, Msg: err.Error()}}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, filepath.Dir(abs), data)
}

// Served are the steps this worker runs: all but the external ones.
func (f *Flow) Served() []*Step {
	out := make([]*Step, 0, len(f.Steps))
	for _, s := range f.Steps {
		if !s.External {
			out = append(out, s)
		}
	}
	return out
}

// Split reports whether another worker serves some of the flow's steps.
func (f *Flow) Split() bool { return len(f.Served()) < len(f.Steps) }

// ModuleConfig is the sandbox configuration of the step's module, less its capabilities
// (which the worker adds from http and env): the one mapping from a step to how its module
// is compiled and limited. serve, validate, module inspect and the dashboard all load a
// step's module with it, so each compiles the code the worker runs.
func (s *Step) ModuleConfig() sandbox.ModuleConfig {
	return sandbox.ModuleConfig{MemoryLimit: s.MemoryLimit, ReuseInstance: s.ReuseInstance, Fuel: s.Fuel}
}
