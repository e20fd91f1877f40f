package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/instrument"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// Engine names accepted by New.
const (
	EngineWazero   = "wazero"
	EngineWasmtime = "wasmtime"
)

// ErrClosed is returned by Load and Run after Close.
var ErrClosed = errors.New("sandbox: engine or module is closed")

// Engines lists the engines compiled into this binary, default first.
func Engines() []string {
	if wasmtimeAvailable {
		return []string{EngineWazero, EngineWasmtime}
	}
	return []string{EngineWazero}
}

// New creates an engine: "wazero" (the default, also for "") or "wasmtime" (only in
// binaries built with -tags wasmtime).
func New(name string, cfg Config) (Engine, error) {
	cfg = cfg.withDefaults()
	if cfg.CacheDir != "" {
		if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("sandbox: compilation cache: %w", err)
		}
	}
	var b backend
	var err error
	switch name {
	case EngineWazero, "":
		name = EngineWazero
		b, err = newWazero(cfg)
	case EngineWasmtime:
		b, err = newWasmtime(cfg)
	default:
		return nil, fmt.Errorf("sandbox: unknown engine %q: choose %q or %q", name, EngineWazero, EngineWasmtime)
	}
	if err != nil {
		return nil, err
	}
	return &engine{name: name, cfg: cfg, b: b, modules: map[*module]struct{}{},
		handoff: make(chan func()), quit: make(chan struct{})}, nil
}

// DefaultCacheDir is the compilation cache folder commands use unless told otherwise:
// $XDG_CACHE_HOME/pgflow-wasm/compiled (or the platform's user cache folder).
func DefaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "pgflow-wasm", "compiled")
}

func (c Config) withDefaults() Config {
	if c.MaxModuleBytes <= 0 {
		c.MaxModuleBytes = DefaultMaxModuleBytes
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxErrorBytes <= 0 {
		c.MaxErrorBytes = DefaultMaxErrorBytes
	}
	if c.MaxLogBytes <= 0 {
		c.MaxLogBytes = DefaultMaxLogBytes
	}
	if c.MaxInputBytes <= 0 {
		c.MaxInputBytes = DefaultMaxInputBytes
	}
	if c.LoadTimeout <= 0 {
		c.LoadTimeout = DefaultLoadTimeout
	}
	if c.WatchdogGrace <= 0 {
		c.WatchdogGrace = DefaultWatchdogGrace
	}
	if c.MaxFunctions <= 0 {
		c.MaxFunctions = DefaultMaxFunctions
	}
	if c.MaxFunctionBytes <= 0 {
		c.MaxFunctionBytes = DefaultMaxFunctionBytes
	}
	if c.CompileTimeout <= 0 {
		c.CompileTimeout = DefaultCompileTimeout
	}
	return c
}

// withDefaults applies the default memory limit and rounds it down to whole pages
// (at most 65535 pages, so every address and size fits in 32 bits).
func (mc ModuleConfig) withDefaults() ModuleConfig {
	if mc.MemoryLimit == 0 {
		mc.MemoryLimit = DefaultMemoryLimit
	}
	mc.MemoryLimit = min(mc.MemoryLimit, maxMemoryLimit) / wasmfile.PageSize * wasmfile.PageSize
	return mc
}

// backend is one WebAssembly engine behind the shared sandbox logic.
type backend interface {
	// compile turns a validated module into code, through the on-disk cache when enabled.
	compile(ctx context.Context, wasm []byte, sha256 string, opts compileOptions) (compiledModule, error)
	close(ctx context.Context) error
}

// compileOptions are the per-step settings that change the generated code.
type compileOptions struct {
	fuel bool // count fuel (wasmtime compiles fuel checks in; wazero always counts)
}

type compiledModule interface {
	// instantiate creates an instance whose host functions serve st, with linear memory
	// capped at st.lim.memoryLimit. The start function, if any, runs here.
	instantiate(ctx context.Context, st *callState) (guestInstance, error)
	close(ctx context.Context) error
}

// guestInstance is one live instance. Errors from call are errInterrupted, a *trapError,
// or the unwinding of a host abort (already recorded in the call state).
type guestInstance interface {
	call(ctx context.Context, name string, args ...uint64) (uint64, error)
	// memoryExhausted says whether a failure of the last call is best explained by the
	// memory limit (see classify).
	memoryExhausted() bool
	// reset makes the instance equal to a new one after a call that returned, or says it
	// cannot (reset.go); adopt then gives it the next task's state. heldBytes is the linear
	// memory it holds.
	reset() bool
	adopt(st *callState)
	heldBytes() uint64
	close(ctx context.Context)
}

// errInterrupted: the engine stopped the guest because the call's context ended.
var errInterrupted = errors.New("interrupted at the deadline")

// trapError is a WebAssembly trap, with the engine's reason normalised to one line.
type trapError struct{ reason string }

func (t *trapError) Error() string { return "wasm trap: " + t.reason }

type engine struct {
	name      string
	cfg       Config
	b         backend
	abandoned atomic.Int64
	life      refs // one reference per loaded module
	// readyBytes is the linear memory reset instances hold between tasks (reset.go).
	readyBytes atomic.Int64

	mu      sync.Mutex
	modules map[*module]struct{}

	// Calls run on pooled goroutines: their stacks are already grown to what the engines
	// need, which saves a stack copy per task.
	handoff  chan func()   // unbuffered: a send succeeds only when a pooled goroutine waits
	quit     chan struct{} // closed by Close: idle pooled goroutines exit
	quitOnce sync.Once
}

func (e *engine) Name() string   { return e.name }
func (e *engine) Abandoned() int { return int(e.abandoned.Load()) }

func (e *engine) Load(ctx context.Context, path string, mc ModuleConfig) (Module, error) {
	if err := checkMemoryLimit(mc); err != nil {
		return nil, err
	}
	wasm, info, err := readModule(path, e.cfg.MaxModuleBytes)
	if err != nil {
		return nil, err
	}
	return e.loadBytes(ctx, wasm, info, mc)
}

func (e *engine) LoadBytes(ctx context.Context, name string, wasm []byte, mc ModuleConfig) (Module, error) {
	if err := checkMemoryLimit(mc); err != nil {
		return nil, err
	}
	info := Info{Path: name, Size: int64(len(wasm))}
	if info.Size > e.cfg.MaxModuleBytes {
		return nil, invalid("module is %s, over the size cap of %s", bytesize.Text(uint64(info.Size)), bytesize.Text(uint64(e.cfg.MaxModuleBytes)))
	}
	sum := sha256.Sum256(wasm)
	info.SHA256 = hex.EncodeToString(sum[:])
	return e.loadBytes(ctx, wasm, info, mc)
}

func checkMemoryLimit(mc ModuleConfig) error {
	if mc.MemoryLimit != 0 && mc.MemoryLimit < wasmfile.PageSize {
		return fmt.Errorf("sandbox: memory limit of %d bytes is below one 64 KiB page", mc.MemoryLimit)
	}
	return nil
}

func (e *engine) loadBytes(ctx context.Context, wasm []byte, info Info, mc ModuleConfig) (Module, error) {
	mc = mc.withDefaults()
	if !e.life.acquire() {
		return nil, ErrClosed
	}
	m, err := e.load(ctx, wasm, info, mc)
	if err != nil {
		e.life.done()
		return nil, err
	}
	e.mu.Lock()
	e.modules[m] = struct{}{}
	e.mu.Unlock()
	return m, nil
}

func (e *engine) load(ctx context.Context, wasm []byte, info Info, mc ModuleConfig) (*module, error) {
	parsed, err := validate(wasm, &info, e.cfg, mc)
	if err != nil {
		return nil, err
	}
	compiled, err := e.compile(ctx, wasm, info.SHA256, compileOptions{fuel: mc.Fuel > 0})
	if err != nil {
		return nil, err
	}
	info.Compilation = e.compilation(compileOptions{fuel: mc.Fuel > 0})
	_, hasInit := parsed.Export(abi.ExportInitialize)
	m := &module{
		eng:      e,
		info:     info,
		compiled: compiled,
		reuse:    mc.ReuseInstance,
		caps:     mc.Capabilities,
		hasInit:  hasInit,
		lim: limits{maxOutput: e.cfg.MaxOutputBytes, maxError: e.cfg.MaxErrorBytes,
			maxLog: e.cfg.MaxLogBytes, memoryLimit: mc.MemoryLimit, fuel: mc.Fuel},
	}
	if info.Mode == ModeReactor {
		if err := m.checkVersion(ctx); err != nil {
			_ = compiled.close(ctx)
			return nil, err
		}
	}
	return m, nil
}

// compilation describes the code a compile with opts produces (Info.Compilation).
func (e *engine) compilation(opts compileOptions) string {
	s := fmt.Sprintf("%s, instrumented v%d", e.name, instrument.Version)
	if e.cfg.Uninstrumented && e.name == EngineWazero {
		s = e.name + ", uninstrumented"
	}
	if opts.fuel {
		s += ", fuel metered"
	}
	return s
}

// compile runs the backend's compile under CompileTimeout. Neither engine can stop a
// compile halfway: one that runs over is left to finish on its goroutine, its result
// released there, and Load fails at once.
func (e *engine) compile(ctx context.Context, wasm []byte, sum string, opts compileOptions) (compiledModule, error) {
	type result struct {
		c   compiledModule
		err error
	}
	done := make(chan result, 1)
	var mu sync.Mutex
	gaveUp := false
	if !e.life.acquire() { // the backend must outlive a compile left running
		return nil, ErrClosed
	}
	go func() {
		defer e.life.done()
		c, err := e.b.compile(ctx, wasm, sum, opts)
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			if c != nil {
				_ = c.close(context.Background())
			}
			return
		}
		done <- result{c, err}
	}()
	finish := func(r result) (compiledModule, error) {
		if r.err != nil {
			return nil, invalid("%s could not compile the module: %v", e.name, r.err)
		}
		return r.c, nil
	}
	t := time.NewTimer(e.cfg.CompileTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return finish(r)
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-done:
		return finish(r)
	default:
	}
	gaveUp = true
	return nil, invalid("compiling the module took longer than %s (the compile timeout): split it or raise the limit", e.cfg.CompileTimeout)
}

// checkVersion instantiates the module once and asks it which ABI version it speaks.
func (m *module) checkVersion(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.eng.cfg.LoadTimeout)
	defer cancel()
	m.life.acquire()
	o, abandoned := m.eng.supervise(ctx, func(stopped func()) outcome {
		defer m.life.done()
		defer stopped()
		st := newCallState(&m.lim, nil, false) // nothing is granted while loading
		st.beginTask(ctx, nil, nil, m.eng.cfg.LoadTimeout)
		defer st.endTask()
		g, err := m.compiled.instantiate(ctx, st)
		if err != nil {
			return m.classifyFailure(ctx, st, nil, err, "instantiating it")
		}
		defer g.close(ctx)
		if m.hasInit {
			if _, err := g.call(ctx, abi.ExportInitialize); err != nil {
				return m.classifyFailure(ctx, st, g, err, "calling "+abi.ExportInitialize)
			}
		}
		v, err := g.call(ctx, abi.ExportABIVersion)
		if err != nil {
			return m.classifyFailure(ctx, st, g, err, "calling "+abi.ExportABIVersion)
		}
		m.info.ABIVersion = int32(uint32(v))
		return outcome{}
	})
	if abandoned {
		return invalid("loading the module timed out after %s (its start code never returned)", m.eng.cfg.LoadTimeout)
	}
	if o.err != nil {
		var se *Error
		if errors.As(o.err, &se) {
			return invalid("the module failed while loading (%s): %s", se.Kind, se.Message)
		}
		return invalid("the module failed while loading: %v", o.err)
	}
	if !slices.Contains(abi.SupportedVersions, m.info.ABIVersion) {
		return invalid("the module speaks ABI version %d (pgflow_abi_version returned it); this host supports %v",
			m.info.ABIVersion, abi.SupportedVersions)
	}
	return nil
}

func (e *engine) Close(ctx context.Context) error {
	e.mu.Lock()
	mods := make([]*module, 0, len(e.modules))
	for m := range e.modules {
		mods = append(mods, m)
	}
	e.mu.Unlock()
	for _, m := range mods {
		_ = m.Close(ctx)
	}
	// The backend closes now, or when the last abandoned call ends (then its error is lost:
	// nobody waits for it any more).
	closed := make(chan error, 1)
	e.life.close(func() { closed <- e.b.close(context.Background()) })
	e.quitOnce.Do(func() { close(e.quit) })
	select {
	case err := <-closed:
		return err
	default:
		return nil
	}
}

func (e *engine) forget(m *module) {
	e.mu.Lock()
	delete(e.modules, m)
	e.mu.Unlock()
}
