//go:build wasmtime

package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	wasmtime "github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/instrument"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

const wasmtimeAvailable = true

// Wasmtime settings. Deadlines use epoch interruption: a goroutine owned by the engine
// bumps the epoch every epochTick, and each call may run for its remaining time in ticks
// (+2), so a guest is stopped at most two ticks after its deadline, loops or not.
const (
	epochTick        = 5 * time.Millisecond
	wasmtimeMaxStack = 512 << 10 // bytes of wasm stack per call (wasmtime's default)
	wasmtimeModule   = "github.com/bytecodealliance/wasmtime-go/v39"
)

// wasmtimeBackend holds two wasmtime engines: fuel counting is an engine setting that
// slows every call down, so modules of steps without `fuel` run on an engine without it.
type wasmtimeBackend struct {
	plain, fueled *wasmtimeEngine
	stop          chan struct{}
	ticker        sync.WaitGroup
}

// wasmtimeEngine is one wasmtime engine with its linker and cache folder.
type wasmtimeEngine struct {
	engine   *wasmtime.Engine
	linker   *wasmtime.Linker
	cacheDir string // "" when the cache is off
	fuel     bool
}

func newWasmtime(cfg Config) (backend, error) {
	b := &wasmtimeBackend{stop: make(chan struct{})}
	var err error
	if b.plain, err = newWasmtimeEngine(cfg, false); err != nil {
		return nil, err
	}
	if b.fueled, err = newWasmtimeEngine(cfg, true); err != nil {
		b.plain.close()
		return nil, err
	}
	b.ticker.Add(1)
	go b.tick()
	return b, nil
}

func newWasmtimeEngine(cfg Config, fuel bool) (*wasmtimeEngine, error) {
	c := wasmtime.NewConfig()
	c.SetEpochInterruption(true)
	c.SetConsumeFuel(fuel)
	c.SetMaxWasmStack(wasmtimeMaxStack)
	c.SetWasmThreads(false)
	c.SetWasmMemory64(false)
	e := &wasmtimeEngine{engine: wasmtime.NewEngineWithConfig(c), fuel: fuel}
	e.linker = wasmtime.NewLinker(e.engine)
	for i := range hostFuncs {
		f := &hostFuncs[i]
		if err := e.linker.FuncNew(f.module, f.name, wasmtimeFuncType(f.sig), wasmtimeHostFunc(f)); err != nil {
			e.close()
			return nil, fmt.Errorf("sandbox: wasmtime host function %s.%s: %w", f.module, f.name, err)
		}
	}
	if cfg.CacheDir != "" {
		// The folder names everything the compiled code depends on; wasmtime also refuses
		// to deserialize code made by another version or configuration.
		settings := fmt.Sprintf("epoch=1 stack=%d threads=0 memory64=0 bulk-chunks=%d", wasmtimeMaxStack, instrument.Version)
		if fuel {
			settings += " fuel=1"
		}
		fp := sha256.Sum256([]byte(settings))
		e.cacheDir = filepath.Join(cfg.CacheDir, fmt.Sprintf("wasmtime-%s-%s-%s-%s",
			wasmtimeVersion(), runtime.GOOS, runtime.GOARCH, hex.EncodeToString(fp[:4])))
		if err := os.MkdirAll(e.cacheDir, 0o700); err != nil {
			e.close()
			return nil, fmt.Errorf("sandbox: wasmtime compilation cache: %w", err)
		}
	}
	return e, nil
}

func (e *wasmtimeEngine) close() {
	e.linker.Close()
	e.engine.Close()
}

// tick advances the engine's epoch with the wall clock: ticks missed while this
// goroutine waited for a CPU are caught up, so deadlines do not drift on a busy machine.
func (b *wasmtimeBackend) tick() {
	defer b.ticker.Done()
	t := time.NewTicker(epochTick)
	defer t.Stop()
	start, epoch := time.Now(), uint64(0)
	for {
		select {
		case <-t.C:
			for want := uint64(time.Since(start) / epochTick); epoch < want; epoch++ {
				b.plain.engine.IncrementEpoch()
				b.fueled.engine.IncrementEpoch()
			}
		case <-b.stop:
			return
		}
	}
}

// wasmtimeVersion is the wasmtime-go module version this binary was built with.
func wasmtimeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == wasmtimeModule {
				return d.Version
			}
		}
	}
	return "v39"
}

func wasmtimeFuncType(t wasmfile.FuncType) *wasmtime.FuncType {
	conv := func(ts []wasmfile.ValType) []*wasmtime.ValType {
		out := make([]*wasmtime.ValType, len(ts))
		for i, v := range ts {
			k := wasmtime.KindI32
			if v == wasmfile.I64 {
				k = wasmtime.KindI64
			}
			out[i] = wasmtime.NewValType(k)
		}
		return out
	}
	return wasmtime.NewFuncType(conv(t.Params), conv(t.Results))
}

// wasmtimeHostFunc adapts a shared host function to wasmtime's calling convention; the
// call state is the store's data. A host abort becomes a trap that unwinds the guest.
func wasmtimeHostFunc(f *hostFunc) func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	hasResult := len(f.sig.Results) == 1
	return func(caller *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		st, _ := caller.Data().(*callState)
		if st == nil {
			return nil, wasmtime.NewTrap("sandbox: host function called without a call state")
		}
		var mem []byte
		if f.needsMemory {
			if ext := caller.GetExport(abi.ExportMemory); ext != nil {
				if m := ext.Memory(); m != nil {
					mem = m.UnsafeData(caller)
				}
			}
		}
		var raw [10]uint64
		for i, a := range args {
			if a.Kind() == wasmtime.KindI64 {
				raw[i] = uint64(a.I64())
			} else {
				raw[i] = uint64(uint32(a.I32()))
			}
		}
		r, err := f.fn(st, mem, raw[:len(args)])
		if err != nil {
			return nil, wasmtime.NewTrap(err.Error())
		}
		if hasResult {
			return []wasmtime.Val{wasmtime.ValI32(int32(uint32(r)))}, nil
		}
		return nil, nil
	}
}

func (b *wasmtimeBackend) compile(_ context.Context, wasm []byte, sum string, opts compileOptions) (compiledModule, error) {
	e := b.plain
	if opts.fuel {
		e = b.fueled
	}
	var cached string
	if e.cacheDir != "" {
		cached = filepath.Join(e.cacheDir, sum+".cwasm")
		// The cache folder is private (0700): deserializing trusts its content.
		if m, err := wasmtime.NewModuleDeserializeFile(e.engine, cached); err == nil {
			return &wasmtimeCompiled{e: e, m: m}, nil
		}
	}
	// Epochs stop loops and calls, not one long memory.fill or memory.copy: those run in
	// chunks (package instrument).
	chunked, err := instrument.ChunkBulkMemory(wasm)
	if err != nil {
		return nil, err
	}
	m, err := wasmtime.NewModule(e.engine, chunked.Wasm)
	if err != nil {
		return nil, err
	}
	if cached != "" {
		if data, err := m.Serialize(); err == nil {
			writeFileAtomic(cached, data)
		}
	}
	return &wasmtimeCompiled{e: e, m: m}, nil
}

func (b *wasmtimeBackend) close(context.Context) error {
	close(b.stop)
	b.ticker.Wait()
	b.plain.close()
	b.fueled.close()
	return nil
}

type wasmtimeCompiled struct {
	e *wasmtimeEngine
	m *wasmtime.Module
}

func (c *wasmtimeCompiled) instantiate(ctx context.Context, st *callState) (guestInstance, error) {
	store := wasmtime.NewStoreWithData(c.e.engine, st)
	// Linear memory is capped by the store: growing past it makes memory.grow return -1.
	store.Limiter(int64(st.lim.memoryLimit), -1, -1, -1, -1)
	g := &wasmtimeInstance{store: store, st: st, fns: map[string]*wasmtime.Func{}, fuel: c.e.fuel, watch: watchEpochs(store)}
	g.watch.begin(ctx, store)
	g.fillFuel()
	inst, err := c.e.linker.Instantiate(store, c.m)
	g.settleFuel()
	if err != nil {
		err = g.wasmtimeError(err)
		g.close(ctx)
		return nil, err
	}
	g.inst = inst
	if ext := inst.GetExport(store, abi.ExportMemory); ext != nil {
		g.mem = ext.Memory()
	}
	return g, nil
}

func (c *wasmtimeCompiled) close(context.Context) error {
	c.m.Close()
	return nil
}

type wasmtimeInstance struct {
	fuel        bool   // the engine counts fuel
	fuelSet     uint64 // the store's fuel when the current call began
	store       *wasmtime.Store
	inst        *wasmtime.Instance
	st          *callState
	fns         map[string]*wasmtime.Func
	mem         *wasmtime.Memory
	sizeAtStart uint64 // memory size when the last call began
	watch       *epochWatch
}

func (i *wasmtimeInstance) call(ctx context.Context, name string, args ...uint64) (uint64, error) {
	fn, ok := i.fns[name]
	if !ok {
		if fn = i.inst.GetFunc(i.store, name); fn == nil {
			return 0, fmt.Errorf("export %s not found", name)
		}
		i.fns[name] = fn
	}
	i.watch.begin(ctx, i.store)
	i.sizeAtStart = i.memorySize()
	params := make([]any, len(args))
	for j, a := range args {
		params[j] = int32(uint32(a))
	}
	i.fillFuel()
	res, err := fn.Call(i.store, params...)
	i.settleFuel()
	if err != nil {
		return 0, i.wasmtimeError(err)
	}
	if v, ok := res.(int32); ok {
		return uint64(uint32(v)), nil
	}
	return 0, nil
}

// memoryExhausted: wasmtime's store limiter cannot report a refused memory.grow, so a
// failed call counts as hitting the limit when its memory grew during the call to at
// least half the limit: allocators grow their heap by doubling at most, so a refused
// request came at that point or later.
func (i *wasmtimeInstance) memoryExhausted() bool {
	size := i.memorySize()
	return size > i.sizeAtStart && size*2 >= i.st.lim.memoryLimit
}

func (i *wasmtimeInstance) memorySize() uint64 {
	if i.mem == nil {
		return 0
	}
	return uint64(i.mem.DataSize(i.store))
}

// reset: wasmtime instances are not reset; each task gets a new one (reset.go), so none
// is held between tasks (and asking its size would cost a cgo call per task).
func (i *wasmtimeInstance) reset() bool       { return false }
func (i *wasmtimeInstance) adopt(*callState)  {}
func (i *wasmtimeInstance) heldBytes() uint64 { return 0 }

func (i *wasmtimeInstance) close(context.Context) {
	i.store.Close()
	i.watch.release()
}

// fillFuel gives the store what is left of the task's fuel (without a limit, more than a
// task can use) so that wasmtime's own count says what the call used.
func (i *wasmtimeInstance) fillFuel() {
	if !i.fuel {
		return
	}
	i.fuelSet = 1 << 62
	if lim := i.st.fuelLimit; lim > 0 {
		i.fuelSet = uint64(max(lim-i.st.fuelUsed, 0))
	}
	_ = i.store.SetFuel(i.fuelSet)
}

func (i *wasmtimeInstance) settleFuel() {
	if !i.fuel {
		return
	}
	if left, err := i.store.GetFuel(); err == nil && left <= i.fuelSet {
		i.st.fuelUsed += int64(i.fuelSet - left)
	}
}

// wasmtimeError maps wasmtime traps to errInterrupted, a fuel abort or the same one-line
// reasons wazero gives, so messages do not depend on the engine.
func (i *wasmtimeInstance) wasmtimeError(err error) error {
	if i.watch.interrupted {
		return errInterrupted // the epoch callback stopped the call: cancelled, or past its deadline
	}
	var trap *wasmtime.Trap
	if errors.As(err, &trap) {
		if code := trap.Code(); code != nil {
			if *code == wasmtime.Interrupt {
				return errInterrupted
			}
			if *code == wasmtime.OutOfFuel {
				return i.st.fail(fuelExhausted(i.st.fuelLimit))
			}
			if r, ok := trapReasons[*code]; ok {
				return &trapError{reason: r}
			}
		}
	}
	if i.fuel && strings.Contains(err.Error(), "all fuel consumed") {
		// Out of fuel outside a function entry comes as a plain error, not a coded trap.
		return i.st.fail(fuelExhausted(i.st.fuelLimit))
	}
	reason, _, _ := strings.Cut(err.Error(), "\n")
	return &trapError{reason: strings.TrimPrefix(reason, "wasm trap: ")}
}

var trapReasons = map[wasmtime.TrapCode]string{
	wasmtime.StackOverflow:          "stack overflow",
	wasmtime.MemoryOutOfBounds:      "out of bounds memory access",
	wasmtime.HeapMisaligned:         "unaligned atomic",
	wasmtime.TableOutOfBounds:       "invalid table access",
	wasmtime.IndirectCallToNull:     "invalid table access",
	wasmtime.BadSignature:           "indirect call type mismatch",
	wasmtime.IntegerOverflow:        "integer overflow",
	wasmtime.IntegerDivisionByZero:  "integer divide by zero",
	wasmtime.BadConversionToInteger: "invalid conversion to integer",
	wasmtime.UnreachableCodeReached: "unreachable",
}
