package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/instrument"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// wazeroCacheDir is the cache subfolder for wazero. wazero's own cache key covers its
// version, the CPU and the module it is given (here the instrumented one), but not the
// runtime configuration: the folder names the instrumentation's version and the settings
// that change the generated code.
var wazeroCacheDir = fmt.Sprintf("wazero-instrumented-v%d", instrument.Version)

// wazeroBackend is the default engine: pure Go, one runtime for every module. The memory
// limit is per step, so it is not a runtime setting here: each instance gets a
// cappedMemory that refuses to grow past the step's limit and remembers that it did.
//
// wazero's machine code cannot be preempted by the Go runtime, so every module is
// instrumented before it is compiled (package instrument): its checkpoints call the
// host's tick often enough that deadlines, fuel, the scheduler and the collector never wait
// for guest code for long. wazero's own WithCloseOnContextDone is off: it only checks at
// loop back-edges, where it costs a call into Go per iteration.
type wazeroBackend struct {
	rt       wazero.Runtime
	cache    wazero.CompilationCache
	cacheDir string // "" when the cache is off
	mcfg     wazero.ModuleConfig
	// instrumented is false only with Config.Uninstrumented.
	instrumented bool
}

type stateKey struct{}

func newWazero(cfg Config) (backend, error) {
	ctx := context.Background()
	rc := wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2)
	b := &wazeroBackend{instrumented: !cfg.Uninstrumented}
	cacheDir := wazeroCacheDir
	if !b.instrumented {
		rc = rc.WithCloseOnContextDone(true)
		cacheDir = "wazero-closeondone"
	}
	if cfg.CacheDir != "" {
		b.cacheDir = filepath.Join(cfg.CacheDir, cacheDir)
		cache, err := wazero.NewCompilationCacheWithDir(b.cacheDir)
		if err != nil {
			return nil, fmt.Errorf("sandbox: wazero compilation cache: %w", err)
		}
		b.cache = cache
		rc = rc.WithCompilationCache(cache)
	}
	b.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	// Guests are anonymous so any number of instances can live at once; start functions
	// are called by the sandbox, not by wazero.
	// wazero's own system context (clocks, random source) is unused, since WASI is served
	// by hostFuncs; giving it a random source skips seeding one per instance.
	b.mcfg = wazero.NewModuleConfig().WithName("").WithStartFunctions().WithRandSource(unusedReader{})

	builders := map[string]wazero.HostModuleBuilder{}
	for _, f := range append(hostFuncPtrs(), &meterFunc) {
		hb, ok := builders[f.module]
		if !ok {
			hb = b.rt.NewHostModuleBuilder(f.module)
			builders[f.module] = hb
		}
		hb.NewFunctionBuilder().
			WithGoModuleFunction(wazeroHostFunc(f), wazeroTypes(f.sig.Params), wazeroTypes(f.sig.Results)).
			Export(f.name)
	}
	for name, hb := range builders {
		if _, err := hb.Instantiate(ctx); err != nil {
			_ = b.close(ctx)
			return nil, fmt.Errorf("sandbox: wazero host module %s: %w", name, err)
		}
	}
	return b, nil
}

func wazeroTypes(ts []wasmfile.ValType) []api.ValueType {
	out := make([]api.ValueType, len(ts))
	for i, t := range ts {
		out[i] = api.ValueType(t) // wazero uses the binary encoding
	}
	return out
}

// wazeroHostFunc adapts a shared host function to wazero's stack calling convention.
// A host abort panics: wazero unwinds the guest and returns the panic as the call error.
func wazeroHostFunc(f *hostFunc) api.GoModuleFunc {
	hasResult := len(f.sig.Results) == 1
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		st, _ := ctx.Value(stateKey{}).(*callState)
		if st == nil {
			panic(errors.New("sandbox: host function called without a call state"))
		}
		var mem []byte
		if f.needsMemory {
			if m := mod.Memory(); m != nil {
				mem, _ = m.Read(0, m.Size())
			}
		}
		r, err := f.fn(st, mem, stack)
		if err != nil {
			panic(err)
		}
		if hasResult {
			stack[0] = r
		}
	}
}

func (b *wazeroBackend) compile(ctx context.Context, wasm []byte, sum string, _ compileOptions) (compiledModule, error) {
	orig := wasm
	fromCache := false
	if b.instrumented {
		var err error
		if wasm, fromCache, err = b.instrument(orig, sum); err != nil {
			return nil, err
		}
	}
	cm, err := b.rt.CompileModule(ctx, wasm)
	if err != nil && fromCache {
		// A damaged instrumented copy: make it again.
		_ = os.Remove(b.instrumentedPath(sum))
		if wasm, _, err = b.instrument(orig, sum); err != nil {
			return nil, err
		}
		cm, err = b.rt.CompileModule(ctx, wasm)
	}
	if err != nil && b.cacheDir != "" && strings.HasPrefix(err.Error(), "compilationcache") {
		// wazero fails on a damaged cache entry instead of recompiling: its entries are
		// named by an internal key, so drop them all (the folders stay) and compile again.
		_ = filepath.WalkDir(b.cacheDir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				_ = os.Remove(p)
			}
			return nil
		})
		cm, err = b.rt.CompileModule(ctx, wasm)
	}
	if err != nil {
		return nil, err
	}
	c := &wazeroCompiled{b: b, cm: cm, overwrites: dataRanges(wasm)}
	if b.instrumented {
		c.reset = resetPlanOf(wasm)
	}
	return c, nil
}

// dataRanges returns the ranges of its memory that instantiating wasm writes, nil when it
// writes none or its memory is imported (then no allocator of ours holds it).
func dataRanges(wasm []byte) *overwritten {
	m, err := wasmfile.Parse(wasm)
	if err != nil || len(m.Memories) != 1 || m.ImportedMemories() != 0 || len(m.Data) == 0 {
		return nil
	}
	size := m.Memories[0].Min * wasmfile.PageSize
	var rs [][2]uint64
	for _, d := range m.Data {
		r := [2]uint64{uint64(d.Offset), uint64(d.Offset) + uint64(d.Size)}
		if r[1] > size {
			return nil // instantiation fails
		}
		if r[1] > r[0] {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	merged := rs[:0]
	for _, r := range rs {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	if len(merged) == 0 {
		return nil
	}
	return &overwritten{ranges: merged}
}

// instrument rewrites the module, through a copy in the cache folder when there is one (a
// standard Go module takes about half a second to rewrite). The folder is private (0700):
// a copy is trusted like wasmtime's compiled code. sum "" skips the cache.
func (b *wazeroBackend) instrument(wasm []byte, sum string) ([]byte, bool, error) {
	path := b.instrumentedPath(sum)
	if path != "" {
		if cached, err := os.ReadFile(path); err == nil {
			return cached, true, nil
		}
	}
	ins, err := instrument.Rewrite(wasm)
	if err != nil {
		return nil, false, err
	}
	if path != "" && os.MkdirAll(filepath.Dir(path), 0o700) == nil {
		writeFileAtomic(path, ins.Wasm)
	}
	return ins.Wasm, false, nil
}

func (b *wazeroBackend) instrumentedPath(sum string) string {
	if b.cacheDir == "" || sum == "" {
		return ""
	}
	return filepath.Join(b.cacheDir, "instrumented", sum+".wasm")
}

func (b *wazeroBackend) close(ctx context.Context) error {
	err := b.rt.Close(ctx)
	if b.cache != nil {
		err = errors.Join(err, b.cache.Close(ctx))
	}
	return err
}

type wazeroCompiled struct {
	b          *wazeroBackend
	cm         wazero.CompiledModule
	overwrites *overwritten // what instantiation writes of the memory (nil: nothing known)
	reset      *resetPlan   // nil: instances are never reset (reset.go)
}

func (c *wazeroCompiled) instantiate(ctx context.Context, st *callState) (guestInstance, error) {
	ctx = context.WithValue(ctx, stateKey{}, st)
	var mem *cappedMemory
	ctx = experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(
		func(_, _ uint64) experimental.LinearMemory {
			mem = &cappedMemory{st: st, overwrites: c.overwrites}
			return mem
		}))
	mod, err := c.b.rt.InstantiateModule(ctx, c.cm, c.b.mcfg)
	if err != nil {
		return nil, wazeroError(err)
	}
	g := &wazeroInstance{mod: mod, st: st, fns: map[string]api.Function{}, mem: mem, plan: c.reset}
	if c.reset != nil {
		c.reset.capture(mod, mem) // no code of the module has run: it has no start function
	}
	if c.b.instrumented {
		counter, ok := mod.ExportedGlobal(instrument.CounterExport).(api.MutableGlobal)
		if !ok {
			_ = mod.Close(ctx)
			return nil, errors.New("the instrumented module has no counter")
		}
		st.settle(int64(counter.Get())) // the start function ran here
		g.counter = counter
	}
	return g, nil
}

func (c *wazeroCompiled) close(ctx context.Context) error { return c.cm.Close(ctx) }

type wazeroInstance struct {
	mod     api.Module
	st      *callState
	fns     map[string]api.Function
	counter api.MutableGlobal // the instrumentation's work counter (nil: uninstrumented)

	mem     *cappedMemory       // nil when the module has no memory
	plan    *resetPlan          // nil: never reset
	globals []api.MutableGlobal // plan.globals of this instance, looked up at its first reset
}

// reset makes the instance equal to a new one (reset.go), unless its memory grew.
func (i *wazeroInstance) reset() bool {
	p := i.plan
	if p == nil {
		return false
	}
	if i.mem != nil && uint64(len(i.mem.buf)) != p.memSize {
		return false
	}
	if i.globals == nil {
		for _, name := range p.globals {
			g, ok := i.mod.ExportedGlobal(name).(api.MutableGlobal)
			if !ok {
				return false
			}
			i.globals = append(i.globals, g)
		}
	}
	for k, g := range i.globals {
		g.Set(p.globalInit[k])
	}
	if i.mem != nil {
		p.restore(i.mem)
	}
	return true
}

// adopt gives a reset instance the state of its next task.
func (i *wazeroInstance) adopt(st *callState) {
	i.st = st
	if i.mem != nil {
		i.mem.st = st
	}
}

func (i *wazeroInstance) heldBytes() uint64 {
	if i.mem == nil {
		return 0
	}
	return uint64(len(i.mem.buf))
}

func (i *wazeroInstance) call(ctx context.Context, name string, args ...uint64) (uint64, error) {
	fn, ok := i.fns[name]
	if !ok {
		if fn = i.mod.ExportedFunction(name); fn == nil {
			return 0, fmt.Errorf("export %s not found", name)
		}
		i.fns[name] = fn
	}
	if i.counter != nil {
		// Each call starts with an empty slice: its first checkpoint asks the host for one.
		i.counter.Set(0)
		i.st.sliceStart = 0
	}
	res, err := fn.Call(context.WithValue(ctx, stateKey{}, i.st), args...)
	if i.counter != nil {
		i.st.settle(int64(i.counter.Get()))
	}
	if err != nil {
		return 0, wazeroError(err)
	}
	if len(res) > 0 {
		return res[0], nil
	}
	return 0, nil
}

// memoryExhausted: cappedMemory knows exactly, so nothing more to guess here.
func (i *wazeroInstance) memoryExhausted() bool { return false }

func (i *wazeroInstance) close(ctx context.Context) { _ = i.mod.Close(ctx) }

// wazeroError maps wazero's errors to errInterrupted or a one-line trap reason.
func wazeroError(err error) error {
	if errors.Is(err, errInterrupted) {
		return errInterrupted
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded, sys.ExitCodeContextCanceled:
			return errInterrupted
		}
		return &trapError{reason: fmt.Sprintf("module closed with exit code %d", exit.ExitCode())}
	}
	reason, _, _ := strings.Cut(err.Error(), "\n")
	reason = strings.TrimPrefix(reason, "wasm error: ")
	return &trapError{reason: reason}
}

// cappedMemory backs one instance's linear memory and refuses to grow it past the
// step's memory limit, recording the refusal so the failure that usually follows is
// reported as memory_limit rather than as an anonymous trap. Small memories come from the
// pool, large ones are mapped from the operating system (mempool.go).
type cappedMemory struct {
	st     *callState
	buf    []byte
	mapped bool // buf is a mapping of the whole limit
	// sparse: buf is a mapping (the whole limit's, or one of the pool's), whose pages the
	// guest never touched are not resident and are zero.
	sparse bool
	// overwrites is what instantiation writes before any guest code runs: the first buffer
	// need only be clear elsewhere, and is given back with them dirty.
	overwrites *overwritten
}

func (m *cappedMemory) Reallocate(size uint64) []byte {
	limit := m.st.lim.memoryLimit
	if size > limit {
		m.st.memRefused = true
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		// Bytes past len were never handed out (memory never shrinks), so they are zero.
		m.buf = m.buf[:size]
		return m.buf
	}
	if size > pooledMax {
		if nb, ok := mapMemory(limit); ok {
			copy(nb, m.buf)
			linearMemories.put(m.buf, m.overwrites)
			m.buf, m.mapped, m.sparse = nb[:size], true, true
			return m.buf
		}
	}
	// Only the instance's first buffer is written by instantiation; a larger one later gets
	// the old one's bytes copied and must be clear beyond them.
	var overwrites *overwritten
	if m.buf == nil {
		overwrites = m.overwrites
	}
	nb, sparse := linearMemories.get(size, min(2*uint64(cap(m.buf)), limit, max(size, pooledMax)), overwrites)
	copy(nb, m.buf)
	linearMemories.put(m.buf, m.overwrites)
	m.buf, m.sparse = nb, sparse
	return nb
}

// Free runs when the instance is closed, which the sandbox does only after its last call
// returned (abandoned calls included), so no guest code can touch the buffer any more.
func (m *cappedMemory) Free() {
	if m.mapped {
		unmapMemory(m.buf)
	} else {
		linearMemories.put(m.buf, m.overwrites)
	}
	m.buf, m.mapped, m.sparse = nil, false, false
}

// unusedReader stands in for wazero's random source, which our WASI never reads.
type unusedReader struct{}

func (unusedReader) Read(p []byte) (int, error) { return len(p), nil }

// writeFileAtomic writes through a temporary file and a rename, so a concurrent reader
// (another worker process) never sees half a file. Errors only cost a recompile later.
func writeFileAtomic(path string, data []byte) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		_ = os.Remove(tmp.Name())
	}
}
