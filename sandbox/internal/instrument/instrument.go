// Package instrument rewrites a WebAssembly module so the host can stop it at any moment
// and count the work it does, whatever the engine's compiled code allows.
//
// wazero's machine code cannot be preempted by the Go runtime and checks its deadline only
// at loop back-edges, so loop-free runaway code (exponential recursion) held the whole
// process. The rewrite adds one mutable i64 global, the counter, and a checkpoint at every
// function entry, at every loop header and after every loop: the checkpoint subtracts the
// static cost of the code up to the next checkpoint and, when the counter drops below zero,
// calls the host import Module.Name with the counter and stores the new value it returns.
// Every path through a function that runs for long passes a checkpoint (code without
// calls and loops runs each instruction at most once), so the host gets control back after
// at most "counter refill" units of work: there it checks the deadline and the fuel budget,
// and the Go scheduler and collector get their chance (a host call is ordinary Go code).
//
// The cost of a checkpoint is the number of non-structural instructions (not block, loop,
// if, else, end, nop) from it to the next checkpoint in the code, both arms of an if
// included: an upper bound of the instructions executed, deterministic for a given input.
//
// A single memory.fill or memory.copy can run for seconds (gigabytes, or pages the
// operating system is slow to provide), and it is one instruction: the rewrite replaces
// both with calls to two added functions that do the same in chunks of bulkChunk bytes,
// with a checkpoint between chunks (bounds are checked first, so a failing operation still
// traps before it writes anything).
//
// Function indices move up by one (the import comes after the module's own imports), so
// every call, ref.func, export, element and start index is renumbered; custom sections
// (names, producers, debug info) are dropped, since their function indices would be stale.
// Only WebAssembly 2.0 (the features wazero's CoreFeaturesV2 enables) and tail calls
// (which wasmtime runs) are understood: anything else is refused with the offset of the
// first unknown byte.
package instrument

import (
	"errors"
	"fmt"
	"strings"
)

// Version changes whenever the rewrite produces different code: compiled-code caches key on it.
const Version = 2

// bulkChunk is the most memory.fill and memory.copy touch between two checkpoints.
const bulkChunk = 1 << 20

// The host import every checkpoint calls when the counter runs out, and the export that
// gives the host the counter.
const (
	Module        = "pgflow_sandbox"
	Name          = "tick"
	CounterExport = "pgflow_sandbox_counter"
)

// What the rewrite tells the host about resetting an instance instead of making a new one
// (docs/RATIONALE.md, "A fresh instance, or one made equal to it"): every mutable global
// the module defines is exported as GlobalExportPrefix followed by its index, and
// ResettableExport (naming the counter: only its presence means something) is exported
// when nothing but the memory and those globals can differ from a new instance's after a
// call: no start function, no instruction that writes a table or drops a segment, no
// mutable global the host cannot set. Every export name with ReservedPrefix is refused in
// the module itself.
const (
	ReservedPrefix     = "pgflow_sandbox_"
	GlobalExportPrefix = "pgflow_sandbox_global_"
	ResettableExport   = "pgflow_sandbox_resettable"
)

// Result is the rewritten module and what the rewrite found.
type Result struct {
	Wasm        []byte
	Checkpoints int // checkpoints inserted
	Functions   int // functions defined by the module
}

// section ids in the order they must appear.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
)

var sectionOrder = []byte{secType, secImport, secFunction, secTable, secMemory, secGlobal, secExport,
	secStart, secElement, secDataCount, secCode, secData}

// module is what the rewrite needs to know before it renumbers.
type module struct {
	sections     map[byte][]byte
	types        int
	importFuncs  int
	importGlobal int
	funcs        int
	globals      int
	usesBulk     bool // the code has memory.fill or memory.copy: the chunked helpers are added
	writesTables bool // the code writes a table or drops a segment (kindTableWrite)
	// mutableGlobals are the global indices of the module's mutable globals of a number
	// type; otherMutable is set by a mutable global of another type or an imported one.
	mutableGlobals []uint32
	otherMutable   bool
	inHelper       bool    // rewriting a helper: its bulk instructions stay
	meter          bool    // add the counter, the tick import and the checkpoints
	ins            []instr // scratch space of function, reused from body to body
	marks          []int
}

// shift is how far the module's own functions move: past the tick import, if any.
func (m *module) shift() uint32 {
	if m.meter {
		return 1
	}
	return 0
}

// helperType is the type index of the bulk helpers: after the tick's, if any.
func (m *module) helperType() uint32 { return uint32(m.types) + m.shift() }

// Rewrite instruments wasm. It never modifies its input.
func Rewrite(wasm []byte) (Result, error) { return rewrite(wasm, true) }

// ChunkBulkMemory only replaces memory.fill and memory.copy with the chunked helpers: no
// counter, no checkpoints, no import, function indices unchanged. For engines that
// interrupt loops themselves (wasmtime's epochs), it bounds the longest instruction.
func ChunkBulkMemory(wasm []byte) (Result, error) { return rewrite(wasm, false) }

func rewrite(wasm []byte, meter bool) (Result, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || string(wasm[4:8]) != "\x01\x00\x00\x00" {
		return Result{}, errors.New("not a WebAssembly 1.0 module")
	}
	m := &module{sections: map[byte][]byte{}, meter: meter}
	r := &reader{b: wasm, off: 8}
	for !r.done() {
		id := r.byte()
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			return Result{}, r.err
		}
		if id == secCustom {
			continue
		}
		if id > secDataCount {
			return Result{}, fmt.Errorf("section id %d is not supported (WebAssembly 2.0 only)", id)
		}
		if _, dup := m.sections[id]; dup {
			return Result{}, fmt.Errorf("section %d appears twice", id)
		}
		m.sections[id] = body
	}
	if err := m.count(); err != nil {
		return Result{}, err
	}
	res := Result{Functions: m.funcs}
	// The code first: it decides whether the bulk-memory helpers are needed.
	code, hasCode := m.sections[secCode]
	if hasCode {
		var err error
		if code, res.Checkpoints, err = m.codeSection(code); err != nil {
			return Result{}, fmt.Errorf("code section: %w", err)
		}
	} else if m.funcs > 0 {
		return Result{}, fmt.Errorf("%d functions but no code section", m.funcs)
	}
	out := append(make([]byte, 0, len(wasm)+len(wasm)/4+64), wasm[:8]...)
	for _, id := range sectionOrder {
		body, has := m.sections[id]
		var err error
		switch id {
		case secType:
			body, err = m.typeSection(body)
			has = true
		case secImport:
			if m.meter {
				body, err = m.importSection(body)
				has = true
			}
		case secFunction:
			if m.usesBulk {
				body, err = m.functionSection(body)
			}
		case secGlobal:
			if has || m.meter {
				body, err = m.globalSection(body)
				has = true
			}
		case secExport:
			if has || m.meter {
				body, err = m.exportSection(body)
				has = true
			}
		case secStart:
			if has {
				body, err = m.startSection(body)
			}
		case secElement:
			if has {
				body, err = m.elementSection(body)
			}
		case secCode:
			body = code
		}
		if err != nil {
			return Result{}, fmt.Errorf("%s section: %w", sectionName(id), err)
		}
		if has {
			out = append(out, id)
			out = appendU32(out, uint32(len(body)))
			out = append(out, body...)
		}
	}
	res.Wasm = out
	return res, nil
}

func sectionName(id byte) string {
	names := []string{"custom", "type", "import", "function", "table", "memory", "global",
		"export", "start", "element", "code", "data", "data count"}
	return names[id]
}

// count reads the sizes of the index spaces the rewrite extends or renumbers.
func (m *module) count() error {
	if b, ok := m.sections[secType]; ok {
		r := &reader{b: b}
		m.types = int(r.u32())
		if r.err != nil {
			return r.err
		}
	}
	if b, ok := m.sections[secImport]; ok {
		r := &reader{b: b}
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.name()
			r.name()
			switch kind := r.byte(); kind {
			case 0x00:
				m.importFuncs++
				r.u32()
			case 0x01:
				r.byte()
				r.limits()
			case 0x02:
				r.limits()
			case 0x03:
				m.importGlobal++
				r.byte()
				if r.byte() == 1 {
					m.otherMutable = true
				}
			default:
				r.fail("import kind 0x%02x is not supported", kind)
			}
		}
		if r.err != nil {
			return fmt.Errorf("import section: %w", r.err)
		}
	}
	if b, ok := m.sections[secFunction]; ok {
		r := &reader{b: b}
		m.funcs = int(r.u32())
		if r.err != nil {
			return r.err
		}
	}
	if b, ok := m.sections[secGlobal]; ok {
		r := &reader{b: b}
		m.globals = int(r.u32())
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

// tickFunc is the index of the host import; the module's own functions move up past it.
func (m *module) tickFunc() uint32 { return uint32(m.importFuncs) }

// fillFunc is the index of the chunked memory.fill; the chunked memory.copy follows it.
func (m *module) fillFunc() uint32 { return uint32(m.importFuncs+m.funcs) + m.shift() }

// counterGlobal is the index of the added global: after every global the module has.
func (m *module) counterGlobal() uint32 { return uint32(m.importGlobal + m.globals) }

// remapFunc renumbers a function index, refusing indices the module does not have (the
// engine would refuse them too, but after the rewrite one of them could name the import).
func (m *module) remapFunc(idx uint32) (uint32, error) {
	switch {
	case idx < uint32(m.importFuncs):
		return idx, nil
	case uint64(idx) < uint64(m.importFuncs)+uint64(m.funcs):
		return idx + m.shift(), nil
	}
	return 0, fmt.Errorf("function index %d is out of range (%d functions)", idx, m.importFuncs+m.funcs)
}

// typeSection appends the tick's type, (i64) -> i64, and the bulk helpers' type,
// (i32, i32, i32) -> ().
func (m *module) typeSection(body []byte) ([]byte, error) {
	n := m.types + int(m.shift())
	if m.usesBulk {
		n++
	}
	out := appendU32(nil, uint32(n))
	if body != nil {
		r := &reader{b: body}
		r.u32()
		out = append(out, body[r.off:]...)
	}
	if m.meter {
		out = append(out, 0x60, 1, 0x7e, 1, 0x7e)
	}
	if m.usesBulk {
		out = append(out, 0x60, 3, 0x7f, 0x7f, 0x7f, 0)
	}
	return out, nil
}

// functionSection declares the two bulk helpers after the module's own functions.
func (m *module) functionSection(body []byte) ([]byte, error) {
	r := &reader{b: body}
	r.u32()
	if r.err != nil {
		return nil, r.err
	}
	out := appendU32(nil, uint32(m.funcs+2))
	out = append(out, body[r.off:]...)
	out = appendU32(out, m.helperType())
	return appendU32(out, m.helperType()), nil
}

// importSection appends the tick import after the module's own imports.
func (m *module) importSection(body []byte) ([]byte, error) {
	n := uint32(0)
	var rest []byte
	if body != nil {
		r := &reader{b: body}
		n = r.u32()
		rest = body[r.off:]
	}
	out := appendU32(nil, n+1)
	out = append(out, rest...)
	out = appendName(out, Module)
	out = appendName(out, Name)
	out = append(out, 0x00)
	return appendU32(out, uint32(m.types)), nil
}

// globalSection renumbers ref.func in initializers and appends the counter (starting at 0,
// so the first checkpoint calls the host, which fills it).
func (m *module) globalSection(body []byte) ([]byte, error) {
	out := appendU32(nil, uint32(m.globals)+m.shift())
	if body != nil {
		r := &reader{b: body}
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			start := r.off
			vt := r.byte()
			if r.byte() == 1 {
				if vt >= 0x7c && vt <= 0x7f { // f64, f32, i64, i32
					m.mutableGlobals = append(m.mutableGlobals, uint32(m.importGlobal)+i)
				} else {
					m.otherMutable = true
				}
			}
			out = append(out, body[start:r.off]...)
			out = m.constExpr(r, out)
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	if !m.meter {
		return out, nil
	}
	return append(out, 0x7e, 0x01, 0x42, 0x00, 0x0b), nil
}

// exportSection renumbers exported functions and appends the rewrite's own exports.
func (m *module) exportSection(body []byte) ([]byte, error) {
	n := uint32(0)
	r := &reader{b: body}
	if body != nil {
		n = r.u32()
	}
	added := m.addedExports()
	out := appendU32(nil, n+uint32(len(added)))
	for i := uint32(0); i < n && r.err == nil; i++ {
		name := r.name()
		if strings.HasPrefix(name, ReservedPrefix) {
			return nil, fmt.Errorf("the module exports %q: names starting with %q are the sandbox's", name, ReservedPrefix)
		}
		kind := r.byte()
		idx := r.u32()
		if r.err != nil {
			break
		}
		if kind == 0x00 {
			var err error
			if idx, err = m.remapFunc(idx); err != nil {
				return nil, fmt.Errorf("export %q: %w", name, err)
			}
		}
		out = appendName(out, name)
		out = append(out, kind)
		out = appendU32(out, idx)
	}
	if r.err != nil {
		return nil, r.err
	}
	for _, e := range added {
		out = appendName(out, e.name)
		out = append(out, 0x03) // a global
		out = appendU32(out, e.global)
	}
	return out, nil
}

// globalExport is an export of a global that the rewrite adds.
type globalExport struct {
	name   string
	global uint32
}

// addedExports are the globals the rewrite exports after the module's own exports: the
// counter, every mutable global, and ResettableExport where it applies; none without the
// meter.
func (m *module) addedExports() []globalExport {
	if !m.meter {
		return nil
	}
	out := []globalExport{{CounterExport, m.counterGlobal()}}
	for _, g := range m.mutableGlobals {
		out = append(out, globalExport{fmt.Sprint(GlobalExportPrefix, g), g})
	}
	if m.resettable() {
		out = append(out, globalExport{ResettableExport, m.counterGlobal()})
	}
	return out
}

// resettable says whether the host can make an instance equal to a new one by writing its
// memory and its exported mutable globals (see ResettableExport).
func (m *module) resettable() bool {
	_, hasStart := m.sections[secStart]
	return !hasStart && !m.writesTables && !m.otherMutable
}

func (m *module) startSection(body []byte) ([]byte, error) {
	r := &reader{b: body}
	idx := r.u32()
	if r.err != nil {
		return nil, r.err
	}
	idx, err := m.remapFunc(idx)
	if err != nil {
		return nil, err
	}
	return appendU32(nil, idx), nil
}

// elementSection renumbers function indices in every form of element segment.
func (m *module) elementSection(body []byte) ([]byte, error) {
	r := &reader{b: body}
	n := r.u32()
	out := appendU32(nil, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		flags := r.u32()
		if flags > 7 {
			return nil, fmt.Errorf("element segment %d has unknown flags %d", i, flags)
		}
		out = appendU32(out, flags)
		if flags&0x02 != 0 && flags&0x01 == 0 { // an explicit table index
			out = appendU32(out, r.u32())
		}
		if flags&0x01 == 0 { // active: an offset expression
			out = m.constExpr(r, out)
		}
		if flags&0x03 != 0 { // elemkind (function indices) or reftype (expressions)
			out = append(out, r.byte())
		}
		count := r.u32()
		out = appendU32(out, count)
		for j := uint32(0); j < count && r.err == nil; j++ {
			if flags&0x04 != 0 {
				out = m.constExpr(r, out)
				continue
			}
			idx, err := m.remapFunc(r.u32())
			if err != nil && r.err == nil {
				return nil, fmt.Errorf("element segment %d: %w", i, err)
			}
			out = appendU32(out, idx)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// constExpr copies a constant expression up to its end, renumbering ref.func.
func (m *module) constExpr(r *reader, out []byte) []byte {
	for r.err == nil {
		in, err := decode(r)
		if err != nil {
			r.err = err
			return out
		}
		if out, err = m.emit(r.b, in, out); err != nil {
			r.err = err
			return out
		}
		if in.op == opEnd {
			return out
		}
	}
	return out
}

// emit copies one decoded instruction, renumbering its function index if it has one.
func (m *module) emit(b []byte, in instr, out []byte) ([]byte, error) {
	switch in.kind {
	case kindFuncIdx:
		idx, err := m.remapFunc(in.imm)
		if err != nil {
			return out, fmt.Errorf("at offset %d: %w", in.start, err)
		}
		out = append(out, b[in.start:in.immAt]...)
		return appendU32(out, idx), nil
	case kindGlobalIdx:
		if uint64(in.imm) >= uint64(m.counterGlobal()) {
			return out, fmt.Errorf("at offset %d: global index %d is out of range (%d globals)", in.start, in.imm, m.counterGlobal())
		}
	case kindFill, kindCopy:
		if m.inHelper {
			break
		}
		out = append(out, opCall)
		if in.kind == kindCopy {
			return appendU32(out, m.fillFunc()+1), nil
		}
		return appendU32(out, m.fillFunc()), nil
	}
	return append(out, b[in.start:in.end]...), nil
}

// codeSection instruments every function body.
func (m *module) codeSection(body []byte) ([]byte, int, error) {
	r := &reader{b: body}
	n := r.u32()
	if r.err != nil {
		return nil, 0, r.err
	}
	if int(n) != m.funcs {
		return nil, 0, fmt.Errorf("%d bodies for %d functions", n, m.funcs)
	}
	checkpoints := 0
	bodies := make([]byte, 0, len(body)+len(body)/2)
	var fn []byte
	for i := uint32(0); i < n; i++ {
		size := r.u32()
		code := r.bytes(int(size))
		if r.err != nil {
			return nil, 0, r.err
		}
		var cps int
		var err error
		fn, cps, err = m.function(code, fn[:0])
		if err != nil {
			return nil, 0, fmt.Errorf("function %d: %w", uint32(m.importFuncs)+i, err)
		}
		checkpoints += cps
		bodies = appendU32(bodies, uint32(len(fn)))
		bodies = append(bodies, fn...)
	}
	if m.usesBulk {
		n += 2
		m.inHelper = true
		defer func() { m.inHelper = false }()
		for _, helper := range [][]byte{fillHelper(), copyHelper()} {
			var cps int
			var err error
			if fn, cps, err = m.function(helper, fn[:0]); err != nil {
				return nil, 0, fmt.Errorf("bulk memory helper: %w", err)
			}
			checkpoints += cps
			bodies = appendU32(bodies, uint32(len(fn)))
			bodies = append(bodies, fn...)
		}
	}
	return append(appendU32(make([]byte, 0, len(bodies)+5), n), bodies...), checkpoints, nil
}

// function rewrites one body: locals unchanged, checkpoints inserted, calls renumbered.
func (m *module) function(code []byte, out []byte) ([]byte, int, error) {
	r := &reader{b: code}
	groups := r.u32()
	for i := uint32(0); i < groups && r.err == nil; i++ {
		r.u32()
		r.byte()
	}
	if r.err != nil {
		return nil, 0, r.err
	}
	out = append(out, code[:r.off]...)

	// First pass: decode, find the checkpoints and the cost of the code after each.
	ins := m.ins[:0]
	marks := append(m.marks[:0], 0) // instruction index each checkpoint goes before
	defer func() { m.ins, m.marks = ins, marks }()
	var blocks []byte // the opcode that opened each enclosing block
	for depth := 1; depth > 0; {
		in, err := decode(r)
		if err != nil {
			return nil, 0, err
		}
		ins = append(ins, in)
		switch in.kind {
		case kindFill, kindCopy:
			m.usesBulk = true
		case kindTableWrite:
			m.writesTables = true
		}
		switch in.op {
		case opBlock, opLoop, opIf:
			blocks = append(blocks, in.op)
			depth++
			if in.op == opLoop {
				marks = append(marks, len(ins))
			}
		case opEnd:
			depth--
			if len(blocks) > 0 {
				opened := blocks[len(blocks)-1]
				blocks = blocks[:len(blocks)-1]
				if opened == opLoop {
					marks = append(marks, len(ins))
				}
			}
		}
	}
	if !r.done() {
		return nil, 0, fmt.Errorf("%d bytes after the end of the body", len(code)-r.off)
	}
	// A checkpoint after the final end would never run.
	if marks[len(marks)-1] == len(ins) {
		marks = marks[:len(marks)-1]
	}
	if !m.meter {
		marks = nil
	}

	// Second pass: emit.
	next := 0
	for i, in := range ins {
		if next < len(marks) && marks[next] == i {
			end := len(ins)
			if next+1 < len(marks) {
				end = marks[next+1]
			}
			out = m.checkpoint(out, cost(ins[i:end]))
			next++
		}
		var err error
		if out, err = m.emit(code, in, out); err != nil {
			return nil, 0, err
		}
	}
	return out, len(marks), nil
}

// cost counts the instructions that do work.
func cost(ins []instr) int64 {
	n := int64(0)
	for _, in := range ins {
		switch in.op {
		case opBlock, opLoop, opIf, opElse, opEnd, opNop:
		default:
			n++
		}
	}
	return max(n, 1)
}

// checkpoint appends: counter -= cost; if counter < 0 { counter = tick(counter) }.
func (m *module) checkpoint(out []byte, c int64) []byte {
	g := m.counterGlobal()
	out = append(out, opGlobalGet)
	out = appendU32(out, g)
	out = append(out, opI64Const)
	out = appendS64(out, c)
	out = append(out, opI64Sub, opGlobalSet)
	out = appendU32(out, g)
	out = append(out, opGlobalGet)
	out = appendU32(out, g)
	out = append(out, opI64Const, 0x00, opI64LtS, opIf, 0x40, opGlobalGet)
	out = appendU32(out, g)
	out = append(out, opCall)
	out = appendU32(out, m.tickFunc())
	out = append(out, opGlobalSet)
	out = appendU32(out, g)
	return append(out, opEnd)
}
