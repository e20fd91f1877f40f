// Package wasmfile reads the parts of a WebAssembly binary that decide whether a module may
// run in the sandbox: types, imports, functions, memories, exports and the start function.
//
// It is deliberately small and engine-independent, so validation and `module inspect` give
// the same answer (and the same messages) whichever engine compiles the code later. Function
// bodies are not decoded: the engines validate code when they compile it.
package wasmfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/leb128"
)

// PageSize is the size of one WebAssembly memory page.
const PageSize = 64 << 10

// ValType is a WebAssembly value type as encoded in the binary.
type ValType byte

// Value types of WebAssembly 2.0.
const (
	I32       ValType = 0x7f
	I64       ValType = 0x7e
	F32       ValType = 0x7d
	F64       ValType = 0x7c
	V128      ValType = 0x7b
	FuncRef   ValType = 0x70
	ExternRef ValType = 0x6f
)

func (v ValType) String() string {
	switch v {
	case I32:
		return "i32"
	case I64:
		return "i64"
	case F32:
		return "f32"
	case F64:
		return "f64"
	case V128:
		return "v128"
	case FuncRef:
		return "funcref"
	case ExternRef:
		return "externref"
	}
	return fmt.Sprintf("type(0x%02x)", byte(v))
}

// FuncType is a function signature.
type FuncType struct {
	Params  []ValType
	Results []ValType
}

// String renders the signature as "(i32, i32) -> i32", "() -> ()" or "(i32) -> (i32, i64)".
func (f FuncType) String() string {
	return "(" + joinTypes(f.Params) + ") -> " + results(f.Results)
}

func results(r []ValType) string {
	if len(r) == 1 {
		return r[0].String()
	}
	return "(" + joinTypes(r) + ")"
}

func joinTypes(ts []ValType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, ", ")
}

// Equal reports whether two signatures are identical.
func (f FuncType) Equal(o FuncType) bool {
	return string(valBytes(f.Params)) == string(valBytes(o.Params)) &&
		string(valBytes(f.Results)) == string(valBytes(o.Results))
}

func valBytes(ts []ValType) []byte {
	b := make([]byte, len(ts))
	for i, t := range ts {
		b[i] = byte(t)
	}
	return b
}

// ExternKind says what an import or export is.
type ExternKind byte

// Extern kinds as encoded in import and export descriptors.
const (
	KindFunc   ExternKind = 0
	KindTable  ExternKind = 1
	KindMemory ExternKind = 2
	KindGlobal ExternKind = 3
	KindTag    ExternKind = 4
)

func (k ExternKind) String() string {
	switch k {
	case KindFunc:
		return "function"
	case KindTable:
		return "table"
	case KindMemory:
		return "memory"
	case KindGlobal:
		return "global"
	case KindTag:
		return "tag"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Limits are the size bounds of a memory (in pages) or a table (in elements).
type Limits struct {
	Min    uint64
	Max    uint64 // meaningful only when HasMax
	HasMax bool
	Shared bool // threads proposal: shared memory
	Is64   bool // memory64 / table64 proposal
}

// Import is one entry of the import section.
type Import struct {
	Module string
	Name   string
	Kind   ExternKind
	Type   FuncType // KindFunc only
	Limits Limits   // KindMemory and KindTable only
}

// Export is one entry of the export section.
type Export struct {
	Name  string
	Kind  ExternKind
	Index uint32 // in the index space of Kind (imports first, then definitions)
}

// Module is what Parse extracts from a binary.
type Module struct {
	Types    []FuncType
	Imports  []Import
	Funcs    []uint32 // type index of each function defined by the module
	Memories []Limits // memories defined by the module
	Exports  []Export
	// Start is the index of the start function when HasStart.
	Start    uint32
	HasStart bool
	// Bodies counts the code section's function bodies; LargestBody is the size in bytes
	// of the largest, and LargestBodyIndex its function index.
	Bodies           int
	LargestBody      int
	LargestBodyIndex uint32
	// Data are the active data segments that instantiation copies into memory 0, in order
	// (passive ones and those of other memories left out); empty when the data section
	// has an offset other than an i32.const, or is one this parser does not read.
	Data []DataSegment
}

// DataSegment is an active data segment of memory 0 at a constant offset.
type DataSegment struct {
	Offset uint32
	Size   uint32
}

// FuncTypeOf returns the signature of function idx in the function index space.
func (m *Module) FuncTypeOf(idx uint32) (FuncType, bool) {
	for _, im := range m.Imports {
		if im.Kind != KindFunc {
			continue
		}
		if idx == 0 {
			return im.Type, true
		}
		idx--
	}
	if uint64(idx) >= uint64(len(m.Funcs)) {
		return FuncType{}, false
	}
	t := m.Funcs[idx]
	if uint64(t) >= uint64(len(m.Types)) {
		return FuncType{}, false
	}
	return m.Types[t], true
}

// Export returns the export called name.
func (m *Module) Export(name string) (Export, bool) {
	for _, e := range m.Exports {
		if e.Name == name {
			return e, true
		}
	}
	return Export{}, false
}

func (m *Module) importedFuncs() int {
	n := 0
	for _, im := range m.Imports {
		if im.Kind == KindFunc {
			n++
		}
	}
	return n
}

// ImportedMemories counts memory imports.
func (m *Module) ImportedMemories() int {
	n := 0
	for _, im := range m.Imports {
		if im.Kind == KindMemory {
			n++
		}
	}
	return n
}

// Section ids of the binary format.
const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secMemory   = 5
	secExport   = 7
	secStart    = 8
	secCode     = 10
	secData     = 11
	secMaxKnown = 13 // tag section (exception handling)
)

var magic = []byte{0x00, 'a', 's', 'm'}

// Parse decodes the module-level sections of a WebAssembly 1.0/2.0 binary.
func Parse(b []byte) (*Module, error) {
	if len(b) < 8 || string(b[:4]) != string(magic) {
		return nil, fmt.Errorf("not a WebAssembly module: the file does not start with the \\0asm magic bytes")
	}
	if v := binary.LittleEndian.Uint32(b[4:8]); v != 1 {
		if v>>16 != 0 {
			return nil, fmt.Errorf("this is a WebAssembly component (layer %d), not a core module: components are not supported", v>>16)
		}
		return nil, fmt.Errorf("unsupported WebAssembly binary version %d (only version 1 is supported)", v)
	}
	m := &Module{}
	r := &reader{b: b, off: 8}
	for r.off < len(b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", id, err)
		}
		if uint64(size) > uint64(len(b)-r.off) {
			return nil, fmt.Errorf("section %d at offset %d: its size %d runs past the end of the file (%d bytes)", id, r.off, size, len(b))
		}
		body := &reader{b: b[:r.off+int(size)], off: r.off}
		r.off += int(size)
		if id > secMaxKnown {
			return nil, fmt.Errorf("unknown section id %d at offset %d", id, body.off)
		}
		if err := m.readSection(id, body); err != nil {
			return nil, fmt.Errorf("%s section: %w", sectionName(id), err)
		}
		if id != secCustom && body.off != len(body.b) {
			return nil, fmt.Errorf("%s section: %d unexpected bytes at its end", sectionName(id), len(body.b)-body.off)
		}
	}
	return m, nil
}

func sectionName(id byte) string {
	names := []string{"custom", "type", "import", "function", "table", "memory", "global",
		"export", "start", "element", "code", "data", "data count", "tag"}
	if int(id) < len(names) {
		return names[id]
	}
	return fmt.Sprintf("section %d", id)
}

func (m *Module) readSection(id byte, r *reader) error {
	switch id {
	case secType:
		return r.vec(func() error {
			t, err := r.funcType()
			m.Types = append(m.Types, t)
			return err
		})
	case secImport:
		return r.vec(func() error {
			im, err := m.readImport(r)
			m.Imports = append(m.Imports, im)
			return err
		})
	case secFunction:
		return r.vec(func() error {
			t, err := r.u32()
			m.Funcs = append(m.Funcs, t)
			return err
		})
	case secMemory:
		return r.vec(func() error {
			l, err := r.limits()
			m.Memories = append(m.Memories, l)
			return err
		})
	case secExport:
		return r.vec(func() error {
			name, err := r.name()
			if err != nil {
				return err
			}
			k, err := r.byte()
			if err != nil {
				return err
			}
			if k > byte(KindTag) {
				return fmt.Errorf("export %q has unknown kind 0x%02x", name, k)
			}
			idx, err := r.u32()
			m.Exports = append(m.Exports, Export{Name: name, Kind: ExternKind(k), Index: idx})
			return err
		})
	case secStart:
		idx, err := r.u32()
		m.Start, m.HasStart = idx, true
		return err
	case secCode:
		// Only the sizes: compiling cost grows with them (the sandbox limits both).
		return r.vec(func() error {
			size, err := r.u32()
			if err != nil {
				return err
			}
			if uint64(size) > uint64(len(r.b)-r.off) {
				return fmt.Errorf("function body of %d bytes at offset %d runs past its section", size, r.off)
			}
			if int(size) > m.LargestBody {
				m.LargestBody, m.LargestBodyIndex = int(size), uint32(m.Bodies+m.importedFuncs())
			}
			m.Bodies++
			r.off += int(size)
			return nil
		})
	case secData:
		m.Data = r.dataSegments()
		r.off = len(r.b)
		return nil
	default:
		// Custom, table, global, element, code, data count and tag sections carry nothing
		// validation needs; the engine checks them when it compiles.
		r.off = len(r.b)
		return nil
	}
}

// dataSegments reads a data section's active segments of memory 0 whose offset is an
// i32.const; nil when the section is not one it reads (the engine judges it).
func (r *reader) dataSegments() []DataSegment {
	var segs []DataSegment
	err := r.vec(func() error {
		flags, err := r.u32()
		if err != nil {
			return err
		}
		if flags > 2 {
			return fmt.Errorf("data segment flags %d", flags)
		}
		var mem uint32
		if flags == 2 {
			if mem, err = r.u32(); err != nil {
				return err
			}
		}
		var offset uint32
		if flags != 1 { // 1: passive, no offset
			// Only i32.const N: another expression (global.get) makes the section one
			// this parser does not read.
			if op, err := r.byte(); err != nil || op != 0x41 {
				return errors.New("the offset is not an i32.const")
			}
			v, n, err := leb128.ReadSigned(r.b[r.off:])
			if err != nil {
				return err
			}
			r.off += n
			if end, err := r.byte(); err != nil || end != 0x0b {
				return errors.New("the offset expression does not end")
			}
			offset = uint32(int32(v))
		}
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(r.b)-r.off) {
			return errors.New("data segment runs past its section")
		}
		r.off += int(size)
		if flags != 1 && mem == 0 {
			segs = append(segs, DataSegment{Offset: offset, Size: size})
		}
		return nil
	})
	if err != nil {
		return nil
	}
	return segs
}

func (m *Module) readImport(r *reader) (Import, error) {
	var im Import
	var err error
	if im.Module, err = r.name(); err != nil {
		return im, err
	}
	if im.Name, err = r.name(); err != nil {
		return im, err
	}
	k, err := r.byte()
	if err != nil {
		return im, err
	}
	im.Kind = ExternKind(k)
	switch im.Kind {
	case KindFunc:
		idx, err := r.u32()
		if err != nil {
			return im, err
		}
		if uint64(idx) >= uint64(len(m.Types)) {
			return im, fmt.Errorf("import %s.%s uses type %d, but the module declares %d types", im.Module, im.Name, idx, len(m.Types))
		}
		im.Type = m.Types[idx]
	case KindTable:
		if _, err := r.valType(); err != nil {
			return im, err
		}
		im.Limits, err = r.limits()
	case KindMemory:
		im.Limits, err = r.limits()
	case KindGlobal:
		if _, err := r.valType(); err != nil {
			return im, err
		}
		_, err = r.byte() // mutability
	case KindTag:
		if _, err := r.byte(); err != nil { // attribute
			return im, err
		}
		_, err = r.u32()
	default:
		return im, fmt.Errorf("import %s.%s has unknown kind 0x%02x", im.Module, im.Name, k)
	}
	return im, err
}

// reader decodes the binary format's primitives with bounds checks everywhere.
type reader struct {
	b   []byte
	off int
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("unexpected end of data at offset %d", r.off)
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// uleb reads an unsigned LEB128 number of at most bits bits.
func (r *reader) uleb(bits uint) (uint64, error) {
	var v uint64
	var shift uint
	start := r.off
	for {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift >= bits || (bits-shift < 7 && c&0x7f>>(bits-shift) != 0) {
			return 0, fmt.Errorf("integer at offset %d does not fit in %d bits", start, bits)
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
		shift += 7
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err
}

func (r *reader) vec(item func() error) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	// Every item takes at least one byte: refuse counts the data cannot hold before looping.
	if uint64(n) > uint64(len(r.b)-r.off) {
		return fmt.Errorf("vector of %d items at offset %d is longer than its section", n, r.off)
	}
	for i := uint32(0); i < n; i++ {
		if err := item(); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		return "", fmt.Errorf("name of %d bytes at offset %d runs past its section", n, r.off)
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

func (r *reader) valType() (ValType, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	switch v := ValType(c); v {
	case I32, I64, F32, F64, V128, FuncRef, ExternRef:
		return v, nil
	}
	return 0, fmt.Errorf("unsupported value type 0x%02x at offset %d (GC and typed function references are not supported)", c, r.off-1)
}

func (r *reader) funcType() (FuncType, error) {
	form, err := r.byte()
	if err != nil {
		return FuncType{}, err
	}
	if form != 0x60 {
		return FuncType{}, fmt.Errorf("unsupported type form 0x%02x at offset %d (only function types; GC types are not supported)", form, r.off-1)
	}
	var t FuncType
	if err := r.vec(func() error {
		v, err := r.valType()
		t.Params = append(t.Params, v)
		return err
	}); err != nil {
		return t, err
	}
	err = r.vec(func() error {
		v, err := r.valType()
		t.Results = append(t.Results, v)
		return err
	})
	return t, err
}

func (r *reader) limits() (Limits, error) {
	flags, err := r.byte()
	if err != nil {
		return Limits{}, err
	}
	if flags > 0x07 {
		return Limits{}, fmt.Errorf("unknown limits flags 0x%02x at offset %d", flags, r.off-1)
	}
	l := Limits{HasMax: flags&1 != 0, Shared: flags&2 != 0, Is64: flags&4 != 0}
	bits := uint(32)
	if l.Is64 {
		bits = 64
	}
	if l.Min, err = r.uleb(bits); err != nil {
		return l, err
	}
	if l.HasMax {
		if l.Max, err = r.uleb(bits); err != nil {
			return l, err
		}
	}
	return l, nil
}
