package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// The host's WASI functions are exactly WASI preview 1: the same names and signatures as
// wazero's own implementation of it.
func TestWASITableMatchesWazero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		t.Fatal(err)
	}
	defs := r.Module(abi.WASIModule).ExportedFunctionDefinitions()
	ours := map[string]string{}
	for _, f := range hostFuncs {
		if f.module == abi.WASIModule {
			ours[f.name] = f.sig.String()
		}
	}
	for name, d := range defs {
		var ft wasmfile.FuncType
		for _, p := range d.ParamTypes() {
			ft.Params = append(ft.Params, wasmfile.ValType(p))
		}
		for _, p := range d.ResultTypes() {
			ft.Results = append(ft.Results, wasmfile.ValType(p))
		}
		if got, ok := ours[name]; !ok {
			t.Errorf("missing WASI function %s %s", name, ft)
		} else if got != ft.String() {
			t.Errorf("WASI %s: ours %s, wazero %s", name, got, ft)
		}
		delete(ours, name)
	}
	for name := range ours {
		t.Errorf("WASI function %s is not in wazero's preview 1", name)
	}
}

func TestPgflowImportsMatchABI(t *testing.T) {
	t.Parallel()
	n := 0
	for _, f := range hostFuncs {
		if f.module != abi.ImportModule {
			continue
		}
		n++
		want := wasmfile.FuncType{Params: i32s(abi.ImportParams[f.name]), Results: i32s(abi.ImportResults[f.name])}
		if !f.sig.Equal(want) {
			t.Errorf("pgflow.%s has %s, want %s", f.name, f.sig, want)
		}
	}
	if n != len(abi.ImportParams) {
		t.Errorf("%d pgflow host functions, the ABI has %d", n, len(abi.ImportParams))
	}
}

func TestSpanBounds(t *testing.T) {
	t.Parallel()
	mem := make([]byte, 100)
	for _, c := range []struct {
		ptr, n uint64
		ok     bool
	}{
		{0, 100, true}, {100, 0, true}, {99, 1, true}, {0, 0, true},
		{99, 2, false}, {101, 0, false}, {0xffffffff, 2, false},
		{1, 0xffffffffffffffff, false}, {0xffffffffffffff00, 0x200, false},
	} {
		if _, ok := span(mem, c.ptr, c.n); ok != c.ok {
			t.Errorf("span(%d, %d) ok=%v, want %v", c.ptr, c.n, ok, c.ok)
		}
	}
}

func TestTextCleaning(t *testing.T) {
	t.Parallel()
	if got := validText([]byte("a\xffb")); got != "a\uFFFDb" {
		t.Errorf("validText = %q", got)
	}
	// "é" is two bytes: cutting after its first byte drops it.
	if got := string(trimPartialRune([]byte("caf\xc3"))); got != "caf" {
		t.Errorf("trimPartialRune = %q", got)
	}
	if got := string(trimPartialRune([]byte("café"))); got != "café" {
		t.Errorf("trimPartialRune kept a whole rune? %q", got)
	}
	c := cappedText{max: 5}
	c.write([]byte("abc"))
	c.write([]byte("défg"))
	if got := c.String(); got != "abcd ... (4 more bytes truncated)" {
		t.Errorf("cappedText = %q", got)
	}
}

func TestCheckOutput(t *testing.T) {
	t.Parallel()
	for out, want := range map[string]string{
		`{"a":1}`:   "",
		` 0 `:       "",
		`"\\u0000"`: "",
		`"\u0000"`:  `\u0000`,
		`{"a":1}{}`: "not valid JSON",
		"\"\xff\"":  "UTF-8",
		``:          "not valid JSON",
		`[1,2,`:     "unexpected end of JSON input",
	} {
		err := checkOutput([]byte(out))
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: unexpected %v", out, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: got %v, want %q", out, err, want)
		}
	}
}
