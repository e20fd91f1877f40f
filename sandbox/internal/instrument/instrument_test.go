package instrument

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// built returns a module built by `make sandbox-testdata`.
func built(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "sandbox", "testdata", "build", name+".wasm"))
	if err != nil {
		t.Fatalf("test module %s is missing: run `make sandbox-testdata` (%v)", name, err)
	}
	return b
}

// Every module the repository builds (test modules and examples, in five languages) stays
// a module wazero accepts once instrumented, and the rewrite never touches its input.
func TestRewriteKeepsModulesValid(t *testing.T) {
	var paths []string
	for _, pattern := range []string{"sandbox/testdata/build/*.wasm", "modules/examples/*/*.wasm"} {
		m, _ := filepath.Glob(filepath.Join(repoRoot(), pattern))
		paths = append(paths, m...)
	}
	if len(paths) < 20 {
		t.Fatalf("found %d modules: run `make modules`", len(paths))
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCoreFeatures(api.CoreFeaturesV2))
	defer rt.Close(ctx)
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p), func(t *testing.T) {
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rt.CompileModule(ctx, orig); err != nil {
				t.Skipf("the original does not compile either: %v", err)
			}
			keep := bytes.Clone(orig)
			res, err := Rewrite(orig)
			if err != nil {
				t.Fatalf("Rewrite: %v", err)
			}
			if !bytes.Equal(orig, keep) {
				t.Fatal("Rewrite modified its input")
			}
			cm, err := rt.CompileModule(ctx, res.Wasm)
			if err != nil {
				t.Fatalf("the instrumented module does not compile: %v", err)
			}
			defer cm.Close(ctx)
			if res.Functions > 0 && res.Checkpoints < res.Functions {
				t.Errorf("%d checkpoints for %d functions: every function entry needs one", res.Checkpoints, res.Functions)
			}
			imports := cm.ImportedFunctions()
			last := imports[len(imports)-1]
			if mod, name, _ := last.Import(); mod != Module || name != Name {
				t.Errorf("the last import is %s.%s, want %s.%s", mod, name, Module, Name)
			}
			if _, ok := cm.ExportedFunctions()["pgflow_handle"]; !ok && strings.Contains(string(orig), "pgflow_handle") {
				t.Error("pgflow_handle is no longer exported")
			}
		})
	}
}

// meter runs an instrumented module under wazero with a tick that hands out slices of
// the given size and counts what the guest used.
type meter struct {
	slice, used, sliceStart int64
	ticks                   int
}

func (m *meter) tick(_ context.Context, stack []uint64) {
	counter := int64(stack[0])
	m.used += m.sliceStart - counter
	m.ticks++
	m.sliceStart = m.slice
	stack[0] = uint64(m.slice)
}

func runMetered(t *testing.T, wasm []byte, slice int64, input int) *meter {
	t.Helper()
	res, err := Rewrite(wasm)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	m := &meter{slice: slice}
	if _, err := rt.NewHostModuleBuilder(Module).NewFunctionBuilder().
		WithGoFunction(api.GoFunc(m.tick), []api.ValueType{api.ValueTypeI64}, []api.ValueType{api.ValueTypeI64}).
		Export(Name).Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.NewHostModuleBuilder("pgflow").NewFunctionBuilder().
		WithGoFunction(api.GoFunc(func(context.Context, []uint64) {}), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, nil).
		Export("output_write").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, res.Wasm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	out, err := mod.ExportedFunction("pgflow_handle").Call(ctx, uint64(input), 0)
	if err != nil || out[0] != 0 {
		t.Fatalf("pgflow_handle = %v, %v", out, err)
	}
	m.used += m.sliceStart - int64(mod.ExportedGlobal(CounterExport).Get())
	return m
}

// The work counted is exact and deterministic: count_loop's cost is linear in its
// iterations, the same on every run, and independent of the slice the host hands out.
func TestCountsWorkDeterministically(t *testing.T) {
	wasm := built(t, "count_loop")
	a := runMetered(t, wasm, 1000, 100)
	b := runMetered(t, wasm, 1000, 200)
	c := runMetered(t, wasm, 7, 200)
	perIter := b.used - a.used
	if perIter <= 0 || perIter%100 != 0 {
		t.Fatalf("100 more iterations cost %d units", perIter)
	}
	if c.used != b.used {
		t.Errorf("the same task used %d units with slices of 7 and %d with slices of 1000", c.used, b.used)
	}
	if c.ticks <= b.ticks {
		t.Errorf("smaller slices should tick more often: %d ticks against %d", c.ticks, b.ticks)
	}
	// One iteration of the loop body: br_if, i32.ge_u, 2 local.get, local.set, i32.add,
	// 2 local.get, local.set, i32.add, local.get, i32.const, br: 13 instructions.
	if got := perIter / 100; got != 13 {
		t.Errorf("one iteration costs %d units, want 13", got)
	}
}

// Loop-free recursion reaches the host: fib(25) without any loop ticks many times.
func TestRecursionTicks(t *testing.T) {
	m := runMetered(t, built(t, "fib"), 10_000, 25)
	if m.ticks < 100 {
		t.Errorf("fib(25) ticked %d times with slices of 10,000 units, want hundreds", m.ticks)
	}
}

// assemble assembles a module from sections: each is an id and its body.
func assemble(sections ...[]byte) []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		out = append(out, s[0])
		out = appendU32(out, uint32(len(s)-1))
		out = append(out, s[1:]...)
	}
	return out
}

// oneFunc is a module with one function () -> () whose body is code (locals included).
func oneFunc(code ...byte) []byte {
	body := append([]byte{0}, code...) // no locals
	return assemble(
		[]byte{secType, 1, 0x60, 0, 0},
		[]byte{secFunction, 1, 0},
		append([]byte{secCode, 1}, append(appendU32(nil, uint32(len(body))), body...)...),
	)
}

func TestRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		wasm []byte
		want string
	}{
		"not wasm":                {[]byte("hello world"), "not a WebAssembly 1.0 module"},
		"global out of range":     {oneFunc(0x23, 0x00, 0x1a, 0x0b), "global index 0 is out of range"},
		"global out of range set": {oneFunc(0x41, 0x00, 0x24, 0x00, 0x0b), "global index 0 is out of range"},
		"call out of range":       {oneFunc(0x10, 0x01, 0x0b), "function index 1 is out of range"},
		"exceptions":              {oneFunc(0x08, 0x00, 0x0b), "unsupported instruction 0x08"},
		"tail call out of range":  {oneFunc(0x12, 0x01, 0x0b), "function index 1 is out of range"},
		"atomics":                 {oneFunc(0xfe, 0x00, 0x0b), "unsupported instruction 0xfe"},
		"truncated body":          {oneFunc(0x41), "unexpected end of data"},
		"bytes after the end":     {oneFunc(0x0b, 0x01), "bytes after the end of the body"},
		"duplicate section":       {assemble([]byte{secType, 0}, []byte{secType, 0}), "appears twice"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Rewrite(c.wasm)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Rewrite: %v, want an error containing %q", err, c.want)
			}
		})
	}
	// A module exporting one of the sandbox's names itself is refused: it would get the
	// counter, or tell the host a global or a fact of its own choosing.
	for _, name := range []string{CounterExport, ResettableExport, GlobalExportPrefix + "0"} {
		exp := appendName([]byte{secExport, 1}, name)
		exp = append(exp, 0x00, 0x00)
		wasm := assemble([]byte{secType, 1, 0x60, 0, 0}, []byte{secFunction, 1, 0}, exp, []byte{secCode, 1, 2, 0, 0x0b})
		if _, err := Rewrite(wasm); err == nil || !strings.Contains(err.Error(), "are the sandbox's") {
			t.Errorf("a module exporting %s: %v", name, err)
		}
	}
}

// The rewrite exports every mutable global of a number type, and says an instance can be
// reset (ResettableExport) only when its memory and those globals are all a call can
// change: not after a table write, a dropped segment, a start function or a mutable global
// the host cannot set.
func TestRewriteSaysWhatAResetMustRestore(t *testing.T) {
	typ := []byte{secType, 1, 0x60, 0, 0}
	fn := []byte{secFunction, 1, 0}
	table := []byte{secTable, 1, 0x70, 0x00, 1}
	mem := []byte{secMemory, 1, 0x00, 1}
	global := []byte{secGlobal, 2, 0x7f, 0x01, 0x41, 0x07, 0x0b, 0x7e, 0x00, 0x42, 0x01, 0x0b} // mutable i32 7, immutable i64 1
	importedGlobal := []byte{secImport, 1, 1, 'm', 1, 'g', 0x03, 0x7f, 0x01}
	dataCount := []byte{secDataCount, 1}
	data := []byte{secData, 1, 0x01, 1, 'x'} // one passive segment
	code := func(c ...byte) []byte {
		body := append(append([]byte{0}, c...), 0x0b)
		return append([]byte{secCode, 1}, append(appendU32(nil, uint32(len(body))), body...)...)
	}
	bumpGlobal := code(0x23, 0, 0x41, 1, 0x6a, 0x24, 0) // global 0 += 1
	for name, c := range map[string]struct {
		sections   [][]byte
		resettable bool
		globals    []string
	}{
		"memory and globals only": {[][]byte{typ, fn, mem, global, bumpGlobal}, true, []string{"0"}},
		"no state at all":         {[][]byte{typ, fn, code()}, true, nil},
		"a table.set":             {[][]byte{typ, fn, table, global, code(0x41, 0, 0xd0, 0x70, 0x26, 0)}, false, []string{"0"}},
		"a table.grow":            {[][]byte{typ, fn, table, code(0xd0, 0x70, 0x41, 1, 0xfc, 15, 0, 0x1a)}, false, nil},
		"a table.fill":            {[][]byte{typ, fn, table, code(0x41, 0, 0xd0, 0x70, 0x41, 1, 0xfc, 17, 0)}, false, nil},
		"a data.drop":             {[][]byte{typ, fn, mem, dataCount, code(0xfc, 9, 0), data}, false, nil},
		"a start function":        {[][]byte{typ, fn, global, {secStart, 0}, bumpGlobal}, false, []string{"0"}},
		"an imported mutable":     {[][]byte{typ, importedGlobal, fn, code()}, false, nil},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := Rewrite(assemble(c.sections...))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCoreFeatures(api.CoreFeaturesV2))
			defer rt.Close(ctx)
			if _, err := rt.CompileModule(ctx, res.Wasm); err != nil {
				t.Fatalf("the instrumented module does not compile: %v", err)
			}
			m, err := wasmfile.Parse(res.Wasm)
			if err != nil {
				t.Fatal(err)
			}
			_, resettable := m.Export(ResettableExport)
			if resettable != c.resettable {
				t.Errorf("resettable %v, want %v", resettable, c.resettable)
			}
			var globals []string
			for _, e := range m.Exports {
				if g, ok := strings.CutPrefix(e.Name, GlobalExportPrefix); ok {
					globals = append(globals, g)
				}
			}
			if !slices.Equal(globals, c.globals) {
				t.Errorf("globals exported %v, want %v", globals, c.globals)
			}
		})
	}
}

// The checkpoint's bytes: what every function entry and loop header gets.
func TestCheckpointShape(t *testing.T) {
	res, err := Rewrite(oneFunc(0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b)) // loop br 0 end end
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoints != 3 { // entry, loop header, after the loop
		t.Errorf("%d checkpoints, want 3", res.Checkpoints)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	if _, err := rt.CompileModule(ctx, res.Wasm); err != nil {
		t.Fatalf("instrumented module does not compile: %v", err)
	}
}

// ChunkBulkMemory keeps every function index and adds no counter: only the helpers.
func TestChunkBulkMemoryOnly(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	for _, name := range []string{"bulk", "fib", "c_memory_bomb"} {
		res, err := ChunkBulkMemory(built(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Checkpoints != 0 {
			t.Errorf("%s: %d checkpoints, want none", name, res.Checkpoints)
		}
		cm, err := rt.CompileModule(ctx, res.Wasm)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, f := range cm.ImportedFunctions() {
			if mod, _, _ := f.Import(); mod == Module {
				t.Errorf("%s: imports %s", name, mod)
			}
		}
		if strings.Contains(string(res.Wasm), CounterExport) {
			t.Errorf("%s: exports the counter", name)
		}
		_ = cm.Close(ctx)
	}
}
