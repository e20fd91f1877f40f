package jshandler

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/compute"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/leb128"
)

// The engine's exports that only the snapshot uses (engine/c/pgflow_js.c).
const (
	exportSource   = "pgflowjs_source"
	exportInit     = "pgflowjs_init"
	exportCompile  = "pgflowjs_compile"
	exportCompiled = "pgflowjs_compiled"
)

// snapshotRuntime is where a handler's engine is initialised: a wazero runtime of its own,
// apart from the sandbox, with every capability refused and no real clock or randomness (so
// the same bundle makes the same snapshot), its memory capped at the step's limit and its
// calls stopped at the deadline.
type snapshotRuntime struct {
	cache wazero.CompilationCache
	// logs are the lines the scripts logged while they were evaluated, once capture returns.
	logs []string
}

// hostState is what the stub pgflow imports record while the engine initialises.
type hostState struct {
	errMsg string
	logs   []string
}

// topLevelRefusal is the message of a capability call made by the handler module's
// top-level code, which runs once for every task of the step.
const topLevelRefusal = "not available while the handler module loads: its top-level code runs once, when the worker loads the step, " +
	"and what it computes is shared by every task; call fetch and read ctx.env inside the handler"

// capture starts the engine, hands it the prelude and the bundle and, when eager, lets it
// evaluate both; it returns the engine's linear memory afterwards.
func (sr *snapshotRuntime) capture(ctx context.Context, engineWasm, prelude, bundle []byte, eager bool, memoryLimit uint64, timeout time.Duration) ([]byte, error) {
	cfg := wazero.NewRuntimeConfigCompiler().
		WithCoreFeatures(api.CoreFeaturesV2).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(uint32(memoryLimit / 65536))
	if sr.cache != nil {
		cfg = cfg.WithCompilationCache(sr.cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer rt.Close(context.WithoutCancel(ctx))
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, err
	}
	hs := &hostState{}
	defer func() { sr.logs = hs.logs }()
	if err := stubHost(ctx, rt, hs); err != nil {
		return nil, err
	}
	compiled, err := rt.CompileModule(ctx, engineWasm)
	if err != nil {
		return nil, fmt.Errorf("compiling the JavaScript engine: %w", err)
	}
	// wazero's defaults: no files, no environment, a fake clock and a fixed random source.
	start := func() (api.Module, error) {
		mod, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			return nil, fmt.Errorf("starting the JavaScript engine: %w", err)
		}
		return mod, nil
	}
	// Only the handler's top-level code runs against timeout: compiling the engine and the
	// scripts takes what it takes on a loaded machine, and is no guest's doing.
	callCtx := ctx
	call := func(mod api.Module, name string, args ...uint64) (uint64, error) {
		f := mod.ExportedFunction(name)
		if f == nil {
			return 0, fmt.Errorf("the JavaScript engine has no export %s (rebuild it: make jsengine)", name)
		}
		r, err := f.Call(callCtx, args...)
		if err != nil {
			if callCtx.Err() != nil && ctx.Err() == nil {
				return 0, fmt.Errorf("the handler module's top-level code did not finish within %s", timeout)
			}
			if hs.errMsg != "" {
				return 0, fmt.Errorf("%w: %s", err, hs.errMsg)
			}
			return 0, err
		}
		if len(r) == 0 {
			return 0, nil
		}
		return r[0], nil
	}
	put := func(mod api.Module, which int, src []byte) error {
		ptr, err := call(mod, exportSource, uint64(which), uint64(len(src)))
		if err != nil {
			return err
		}
		if ptr == 0 || !mod.Memory().Write(uint32(ptr), src) {
			return fmt.Errorf("the handler's %d bytes of JavaScript do not fit in the step's memory limit", len(src))
		}
		return nil
	}

	// The scripts are compiled in an instance of their own: parsing takes several times a
	// script's size for a moment, and the snapshot keeps all the memory its instance ever
	// grew to (engine/c/pgflow_js.c, pgflowjs_compile).
	scratch, err := start()
	if err != nil {
		return nil, err
	}
	if _, err := call(scratch, abi.ExportInitialize); err != nil {
		return nil, err
	}
	var code [2][]byte
	for i, src := range [][]byte{prelude, bundle} {
		if err := put(scratch, i, src); err != nil {
			return nil, err
		}
		n, err := call(scratch, exportCompile, uint64(i))
		if err != nil {
			return nil, err
		}
		if int32(n) < 0 {
			return nil, &initError{msg: hs.errMsg}
		}
		at, err := call(scratch, exportCompiled)
		if err != nil {
			return nil, err
		}
		b, ok := scratch.Memory().Read(uint32(at), uint32(n))
		if !ok {
			return nil, errors.New("reading the compiled script failed")
		}
		code[i] = bytes.Clone(b)
	}
	_ = scratch.Close(ctx)

	mod, err := start()
	if err != nil {
		return nil, err
	}
	if _, err := call(mod, abi.ExportInitialize); err != nil {
		return nil, err
	}
	for i, c := range code {
		if err := put(mod, 2+i, c); err != nil { // 2+i: bytecode
			return nil, err
		}
	}
	var e uint64
	if eager {
		e = 1
	}
	var cancel context.CancelFunc
	callCtx, cancel = context.WithTimeout(ctx, timeout)
	defer cancel()
	status, err := call(mod, exportInit, e)
	if err != nil {
		return nil, err
	}
	if status != 0 {
		return nil, &initError{msg: hs.errMsg}
	}
	mem, ok := mod.Memory().Read(0, mod.Memory().Size())
	if !ok {
		return nil, errors.New("reading the engine's memory failed")
	}
	return bytes.Clone(mem), nil
}

// initError is the handler module failing while it loads (its top-level code threw, or it
// exports no handler); msg is the engine's, stack not yet mapped.
type initError struct{ msg string }

func (e *initError) Error() string { return e.msg }

// stubHost provides the pgflow imports while the engine initialises: no input, and every
// capability refused with topLevelRefusal.
func stubHost(ctx context.Context, rt wazero.Runtime, hs *hostState) error {
	b := rt.NewHostModuleBuilder(abi.ImportModule)
	def := func(name string, f api.GoModuleFunc) {
		params := make([]api.ValueType, abi.ImportParams[name])
		for i := range params {
			params[i] = api.ValueTypeI32
		}
		results := make([]api.ValueType, abi.ImportResults[name])
		for i := range results {
			results[i] = api.ValueTypeI32
		}
		b.NewFunctionBuilder().WithGoModuleFunction(f, params, results).Export(name)
	}
	read := func(m api.Module, ptr, n uint64) string {
		data, _ := m.Memory().Read(uint32(ptr), uint32(n))
		return string(data)
	}
	refusal := ""
	def(abi.ImportInputRead, func(context.Context, api.Module, []uint64) {})
	def(abi.ImportContextRead, func(context.Context, api.Module, []uint64) {})
	def(abi.ImportOutputWrite, func(context.Context, api.Module, []uint64) {})
	def(abi.ImportErrorWrite, func(_ context.Context, m api.Module, s []uint64) { hs.errMsg = read(m, s[0], s[1]) })
	def(abi.ImportLog, func(_ context.Context, m api.Module, s []uint64) { hs.logs = append(hs.logs, read(m, s[1], s[2])) })
	// A request is refused at top level whichever way it is sent (blocking or in the background).
	refuseFetch := func(_ context.Context, _ api.Module, s []uint64) {
		refusal = "fetch is " + topLevelRefusal
		s[0] = api.EncodeI32(abi.ErrDenied)
	}
	def(abi.ImportHTTPRequest, refuseFetch)
	def(abi.ImportHTTPStart, refuseFetch)
	def(abi.ImportHTTPWait, func(_ context.Context, _ api.Module, s []uint64) { s[0] = api.EncodeI32(abi.ErrBadRequest) })
	def(abi.ImportHTTPResponseRead, func(_ context.Context, _ api.Module, s []uint64) { s[0] = 0 })
	def(abi.ImportConfigGet, func(_ context.Context, _ api.Module, s []uint64) {
		refusal = "ctx.env is " + topLevelRefusal
		s[0] = api.EncodeI32(abi.ErrDenied)
	})
	def(abi.ImportSQLQuery, func(_ context.Context, _ api.Module, s []uint64) {
		refusal = "ctx.sql is " + topLevelRefusal
		s[0] = api.EncodeI32(abi.ErrDenied)
	})
	def(abi.ImportSQLResultRead, func(_ context.Context, _ api.Module, s []uint64) { s[0] = 0 })
	// Crypto computes and reaches nothing, so top-level code may import its keys once for
	// every task; only a generated key is refused, as every task would share it.
	var computeResult []byte
	def(abi.ImportComputeCall, func(_ context.Context, m api.Module, s []uint64) {
		req := []byte(read(m, s[0], s[1]))
		computeResult = nil
		if bytes.Contains(req, []byte(`"op":"generate"`)) {
			refusal = "crypto.subtle.generateKey is not available while the handler module loads: its top-level code runs once, " +
				"when the worker loads the step, and a key made there would be shared by every task; generate keys inside the handler"
			s[0] = api.EncodeI32(abi.ErrDenied)
			return
		}
		out, err := compute.Call(req)
		if err != nil {
			refusal = err.Error()
			s[0] = api.EncodeI32(abi.ErrBadRequest)
			return
		}
		computeResult = out
		s[0] = api.EncodeI32(int32(len(out)))
	})
	def(abi.ImportComputeResultRead, func(_ context.Context, m api.Module, s []uint64) {
		n := uint32(min(uint64(len(computeResult)), s[1]))
		if n > 0 {
			m.Memory().Write(uint32(s[0]), computeResult[:n])
		}
		s[0] = api.EncodeI32(int32(len(computeResult)))
	})
	def(abi.ImportLastError, func(_ context.Context, m api.Module, s []uint64) {
		n := uint32(min(uint64(len(refusal)), s[1]))
		if n > 0 {
			m.Memory().Write(uint32(s[0]), []byte(refusal[:n]))
		}
		s[0] = api.EncodeI32(int32(len(refusal)))
	})
	_, err := b.Instantiate(ctx)
	return err
}

// rewrite returns the engine module with mem as its initial memory: the data section holds
// mem's non-zero bytes, the memory's minimum is mem's size, and the exports only the
// snapshot needed (_initialize among them: wasi-libc's start-up must not run again over an
// initialised heap) are gone. What makes this sound: the engine's only mutable global is the
// C stack pointer, which is back at its initial value whenever no call runs (the stack lies
// below it and is left out), and its table never changes (C code makes no table.set or
// table.grow).
func rewrite(wasm, mem []byte) ([]byte, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return nil, errors.New("the engine is not a WebAssembly module")
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	for p := 8; p < len(wasm); {
		id := wasm[p]
		n, k := binary.Uvarint(wasm[p+1:])
		if k <= 0 || p+1+k+int(n) > len(wasm) {
			return nil, errors.New("the engine module is truncated")
		}
		secs = append(secs, section{id, wasm[p+1+k : p+1+k+int(n)]})
		p += 1 + k + int(n)
	}
	stackTop := -1
	for _, s := range secs {
		switch s.id {
		case 6:
			top, err := stackPointer(s.body)
			if err != nil {
				return nil, err
			}
			stackTop = top
		case 8:
			return nil, errors.New("the engine has a start function: only reactors can be snapshotted")
		}
	}
	if stackTop < 0 || stackTop > len(mem) {
		return nil, errors.New("the engine has no stack pointer global")
	}
	runs := nonZeroRuns(mem, stackTop, segmentGap)
	var out bytes.Buffer
	out.Write(wasm[:8])
	emit := func(id byte, body []byte) {
		out.WriteByte(id)
		out.Write(binary.AppendUvarint(nil, uint64(len(body))))
		out.Write(body)
	}
	sawData := false
	for _, s := range secs {
		switch s.id {
		case 5: // memory: one memory, its minimum raised to the snapshot's pages
			if cnt, k := binary.Uvarint(s.body); cnt != 1 || k != 1 {
				return nil, errors.New("the engine must have exactly one memory")
			}
			flags := s.body[1]
			if flags > 1 {
				return nil, fmt.Errorf("the engine's memory has flags %d (shared or 64-bit)", flags)
			}
			_, k := binary.Uvarint(s.body[2:])
			b := []byte{1, flags}
			b = binary.AppendUvarint(b, uint64(len(mem)/65536))
			b = append(b, s.body[2+k:]...) // the maximum, if any
			emit(5, b)
		case 7:
			b, err := dropExports(s.body, abi.ExportInitialize, exportSource, exportInit, exportCompile, exportCompiled)
			if err != nil {
				return nil, err
			}
			emit(7, b)
		case 12: // data count
			emit(12, binary.AppendUvarint(nil, uint64(len(runs))))
		case 11:
			sawData = true
			b := binary.AppendUvarint(nil, uint64(len(runs)))
			for _, r := range runs {
				b = append(b, 0, 0x41) // active segment of memory 0 at i32.const offset
				b = leb128.AppendSigned(b, int64(int32(uint32(r[0]))))
				b = append(b, 0x0b)
				b = binary.AppendUvarint(b, uint64(r[1]-r[0]))
				b = append(b, mem[r[0]:r[1]]...)
			}
			emit(11, b)
		default:
			emit(s.id, s.body)
		}
	}
	if !sawData {
		return nil, errors.New("the engine has no data section")
	}
	return out.Bytes(), nil
}

// stackPointer checks that the global section holds one global, the mutable i32 stack
// pointer that wasm-ld makes, and returns its initial value.
func stackPointer(body []byte) (int, error) {
	cnt, k := binary.Uvarint(body)
	if cnt != 1 || len(body) < k+4 || body[k] != 0x7f || body[k+1] != 1 || body[k+2] != 0x41 {
		return 0, errors.New("the engine must have exactly one global, the stack pointer: anything else could hold state the snapshot misses")
	}
	v, _, err := leb128.ReadSigned(body[k+3:])
	return int(v), err
}

func dropExports(body []byte, names ...string) ([]byte, error) {
	cnt, q := binary.Uvarint(body)
	var kept [][]byte
	for range cnt {
		start := q
		nl, k := binary.Uvarint(body[q:])
		if k <= 0 || q+k+int(nl)+1 > len(body) {
			return nil, errors.New("the engine's export section is truncated")
		}
		name := string(body[q+k : q+k+int(nl)])
		q += k + int(nl) + 1 // name, kind
		_, k = binary.Uvarint(body[q:])
		q += k
		drop := false
		for _, n := range names {
			drop = drop || n == name
		}
		if !drop {
			kept = append(kept, body[start:q])
		}
	}
	out := binary.AppendUvarint(nil, uint64(len(kept)))
	for _, e := range kept {
		out = append(out, e...)
	}
	return out, nil
}

// segmentGap is the longest run of zeros a data segment spans rather than ending. Each
// segment costs every instance of the snapshot an evaluation of its offset (with allocations,
// in wazero) and a separate copy, while a zero copied along costs a byte of memmove: the
// engine's heap is dense, and page-long gaps leave a few segments (docs/benchmarks.md).
const segmentGap = 4096

// nonZeroRuns returns the [start, end) ranges of mem[from:] that hold non-zero bytes, runs
// closer than gap merged.
func nonZeroRuns(mem []byte, from, gap int) [][2]int {
	var runs [][2]int
	start, last := -1, -1
	for i := from; i < len(mem); i++ {
		if mem[i] == 0 {
			continue
		}
		if start >= 0 && i-last > gap {
			runs = append(runs, [2]int{start, last + 1})
			start = -1
		}
		if start < 0 {
			start = i
		}
		last = i
	}
	if start >= 0 {
		runs = append(runs, [2]int{start, last + 1})
	}
	return runs
}
