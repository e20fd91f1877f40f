package wasmfile

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// module assembles a binary from sections given as (id, body) pairs.
func module(sections ...[]byte) []byte {
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range sections {
		b = append(b, s...)
	}
	return b
}

func section(id byte, body ...byte) []byte {
	return append([]byte{id, byte(len(body))}, body...)
}

func str(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// A reactor-shaped module: two types, one import, two functions, one memory, exports.
var reactor = module(
	// types: 0 = (i32, i32) -> i32, 1 = (i32) -> ()
	section(1, 2, 0x60, 2, 0x7f, 0x7f, 1, 0x7f, 0x60, 1, 0x7f, 0),
	// import pgflow.input_read : type 1
	section(2, cat([]byte{1}, str("pgflow"), str("input_read"), []byte{0x00, 1})...),
	// functions: type 0, type 0
	section(3, 2, 0, 0),
	// memory: min 2, max 10
	section(5, 1, 0x01, 2, 10),
	// exports: memory, pgflow_handle = func 1 (the first defined function)
	section(7, cat([]byte{2}, str("memory"), []byte{0x02, 0}, str("pgflow_handle"), []byte{0x00, 1})...),
	// a custom section is skipped
	section(0, cat(str("name"), []byte{1, 2, 3})...),
)

func TestParseReactor(t *testing.T) {
	t.Parallel()
	m, err := Parse(reactor)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Imports) != 1 || m.Imports[0].Module != "pgflow" || m.Imports[0].Name != "input_read" ||
		m.Imports[0].Type.String() != "(i32) -> ()" {
		t.Errorf("imports %+v", m.Imports)
	}
	if len(m.Memories) != 1 || m.Memories[0] != (Limits{Min: 2, Max: 10, HasMax: true}) {
		t.Errorf("memories %+v", m.Memories)
	}
	e, ok := m.Export("pgflow_handle")
	if !ok || e.Kind != KindFunc {
		t.Fatalf("export pgflow_handle: %+v %v", e, ok)
	}
	ft, ok := m.FuncTypeOf(e.Index)
	if !ok || ft.String() != "(i32, i32) -> i32" {
		t.Errorf("pgflow_handle type %s %v", ft, ok)
	}
	if ft, ok := m.FuncTypeOf(0); !ok || ft.String() != "(i32) -> ()" {
		t.Errorf("function 0 (the import) has type %s %v", ft, ok)
	}
	if _, ok := m.FuncTypeOf(3); ok {
		t.Error("function 3 does not exist")
	}
}

// The data section's active segments of memory 0 at constant offsets are read (a negative
// LEB128 offset as the i32 it is); passive ones and other memories' are left out; a segment
// at a global's offset leaves the whole list empty.
func TestDataSegments(t *testing.T) {
	t.Parallel()
	data := section(11,
		4,
		0, 0x41, 0x80, 0x01, 0x0b, 3, 'a', 'b', 'c', // active at 128
		1, 2, 'x', 'y', // passive
		2, 1, 0x41, 0, 0x0b, 1, 'z', // memory 1
		2, 0, 0x41, 0x7f, 0x0b, 2, 'q', 'r', // memory 0 at -1 (0xffffffff)
	)
	m, err := Parse(cat(reactor, data))
	if err != nil {
		t.Fatal(err)
	}
	if want := []DataSegment{{128, 3}, {0xffffffff, 2}}; !slices.Equal(m.Data, want) {
		t.Errorf("data %+v, want %+v", m.Data, want)
	}
	global := section(11, 2, 0, 0x41, 0, 0x0b, 1, 'a', 0, 0x23, 0, 0x0b, 1, 'b')
	if m, err := Parse(cat(reactor, global)); err != nil || m.Data != nil {
		t.Errorf("a segment at global 0's offset: data %+v, %v; want none", m.Data, err)
	}
}

func TestSignatureText(t *testing.T) {
	t.Parallel()
	for want, ft := range map[string]FuncType{
		"() -> ()":               {},
		"(i32, i64) -> i32":      {Params: []ValType{I32, I64}, Results: []ValType{I32}},
		"(f32) -> (f64, v128)":   {Params: []ValType{F32}, Results: []ValType{F64, V128}},
		"(funcref) -> externref": {Params: []ValType{FuncRef}, Results: []ValType{ExternRef}},
	} {
		if got := ft.String(); got != want {
			t.Errorf("%v renders %q, want %q", ft, got, want)
		}
	}
	a := FuncType{Params: []ValType{I32}}
	if !a.Equal(FuncType{Params: []ValType{I32}}) || a.Equal(FuncType{Results: []ValType{I32}}) {
		t.Error("Equal is wrong")
	}
}

func TestLimitsFlags(t *testing.T) {
	t.Parallel()
	for flags, want := range map[byte]Limits{
		0x00: {Min: 1},
		0x01: {Min: 1, Max: 3, HasMax: true},
		0x03: {Min: 1, Max: 3, HasMax: true, Shared: true},
		0x04: {Min: 1, Is64: true},
	} {
		body := []byte{1, flags, 1}
		if flags&1 != 0 {
			body = append(body, 3)
		}
		m, err := Parse(module(section(5, body...)))
		if err != nil {
			t.Fatalf("flags %#x: %v", flags, err)
		}
		if m.Memories[0] != want {
			t.Errorf("flags %#x: %+v, want %+v", flags, m.Memories[0], want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		bin  []byte
		want string
	}{
		"empty":        {nil, "not a WebAssembly module"},
		"text":         {[]byte("(module)"), "not a WebAssembly module"},
		"version 2":    {[]byte{0, 'a', 's', 'm', 2, 0, 0, 0}, "unsupported WebAssembly binary version 2"},
		"component":    {[]byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}, "component"},
		"section size": {module([]byte{1, 50, 0}), "runs past the end of the file"},
		"unknown id":   {module(section(99)), "unknown section id 99"},
		"bad type form": {module(section(1, 1, 0x5f, 0, 0)),
			"unsupported type form 0x5f"},
		"bad value type": {module(section(1, 1, 0x60, 1, 0x01, 0)), "unsupported value type 0x01"},
		"import type out of range": {module(section(2, cat([]byte{1}, str("a"), str("b"), []byte{0, 5})...)),
			"uses type 5, but the module declares 0 types"},
		"huge vector":   {module(section(3, 0xff, 0xff, 0x03)), "longer than its section"},
		"leb too long":  {module(section(3, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01)), "does not fit in 32 bits"},
		"leb overflow":  {module(section(3, 1, 0xff, 0xff, 0xff, 0xff, 0x7f)), "does not fit in 32 bits"},
		"trailing":      {module(section(8, 0, 0)), "unexpected bytes at its end"},
		"bad limits":    {module(section(5, 1, 0x09, 1)), "unknown limits flags 0x09"},
		"name too long": {module(section(7, 1, 40, 'a')), "runs past its section"},
		"truncated":     {reactor[:len(reactor)-3], "runs past the end of the file"},
	}
	for name, c := range cases {
		_, err := Parse(c.bin)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}

// FuzzParse: no input makes the parser panic or loop.
func FuzzParse(f *testing.F) {
	f.Add(reactor)
	f.Add(module(section(5, 1, 0x03, 1, 1)))
	f.Add([]byte{0, 'a', 's', 'm', 1, 0, 0, 0, 2, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err == nil {
			for _, e := range m.Exports {
				_, _ = m.FuncTypeOf(e.Index)
			}
		}
	})
}
