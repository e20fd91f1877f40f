package instrument

import (
	"fmt"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/leb128"
)

// Opcodes the rewrite looks at or writes.
const (
	opBlock     = 0x02
	opLoop      = 0x03
	opIf        = 0x04
	opElse      = 0x05
	opEnd       = 0x0b
	opCall      = 0x10
	opNop       = 0x01
	opGlobalGet = 0x23
	opGlobalSet = 0x24
	opI64Const  = 0x42
	opI64LtS    = 0x53
	opI64Sub    = 0x7d
	opRefFunc   = 0xd2
)

// What an instruction's immediate means to the rewrite.
const (
	kindPlain      = iota
	kindFuncIdx    // imm is a function index (call, ref.func)
	kindGlobalIdx  // imm is a global index (global.get, global.set)
	kindFill       // memory.fill of memory 0
	kindCopy       // memory.copy within memory 0
	kindTableWrite // changes a table or drops a segment: instance state beyond memory and globals
)

// instr is one decoded instruction: its bytes are b[start:end]; a function index to
// renumber starts at immAt.
type instr struct {
	op         byte
	kind       int
	imm        uint32
	start, end int
	immAt      int
}

// decode reads one instruction of WebAssembly 2.0 (MVP, sign extension, saturating
// conversions, multi-value, bulk memory, reference types, SIMD) or of the tail-call
// proposal.
func decode(r *reader) (instr, error) {
	in := instr{start: r.off}
	in.op = r.byte()
	switch op := in.op; {
	case op == opBlock || op == opLoop || op == opIf:
		r.s33() // block type: empty, a value type, or a type index
	case op == opElse || op == opEnd || op == 0x00 || op == opNop || op == 0x0f || op == 0x1a || op == 0x1b:
		// unreachable, nop, return, drop, select: no immediate
	case op == 0x0c || op == 0x0d: // br, br_if
		r.u32()
	case op == 0x0e: // br_table
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == opCall:
		in.kind, in.immAt = kindFuncIdx, r.off
		in.imm = r.u32()
	case op == 0x12: // return_call (tail calls: wasmtime has them, wazero refuses them)
		in.kind, in.immAt = kindFuncIdx, r.off
		in.imm = r.u32()
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect: type, table
		r.u32()
		r.u32()
	case op == 0x1c: // select with types
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.byte()
		}
	case op >= 0x20 && op <= 0x22: // local.get, local.set, local.tee
		r.u32()
	case op == opGlobalGet || op == opGlobalSet:
		in.kind = kindGlobalIdx
		in.imm = r.u32()
	case op == 0x25: // table.get
		r.u32()
	case op == 0x26: // table.set
		in.kind = kindTableWrite
		r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		r.u32()
	case op == 0x41: // i32.const
		r.sleb(32)
	case op == opI64Const:
		r.sleb(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op >= 0x45 && op <= 0xc4: // numeric, sign extension
	case op == 0xd0: // ref.null
		r.byte()
	case op == 0xd1: // ref.is_null
	case op == opRefFunc:
		in.kind, in.immAt = kindFuncIdx, r.off
		in.imm = r.u32()
	case op == 0xfc:
		in.kind = decodeFC(r)
	case op == 0xfd:
		decodeSIMD(r)
	default:
		if r.err == nil {
			return in, fmt.Errorf("unsupported instruction 0x%02x at offset %d (WebAssembly 2.0 and tail calls only: no exceptions, threads or GC)", op, in.start)
		}
	}
	in.end = r.off
	return in, r.err
}

// decodeFC reads the saturating conversions, bulk memory and table instructions.
func decodeFC(r *reader) int {
	start := r.off
	switch sub := r.u32(); {
	case sub == 10: // memory.copy
		if r.u32() == 0 && r.u32() == 0 {
			return kindCopy
		}
	case sub == 11: // memory.fill
		if r.u32() == 0 {
			return kindFill
		}
	case sub <= 7: // trunc_sat
	case sub == 8: // memory.init data, memory
		r.u32()
		r.u32()
	case sub == 9: // data.drop
		r.u32()
		return kindTableWrite
	case sub == 12 || sub == 14: // table.init elem table, table.copy table table
		r.u32()
		r.u32()
		return kindTableWrite
	case sub == 16: // table.size
		r.u32()
	case sub == 13 || sub == 15 || sub == 17: // elem.drop, table.grow, table.fill
		r.u32()
		return kindTableWrite
	default:
		r.fail("unsupported instruction 0xfc %d at offset %d", sub, start-1)
	}
	return kindPlain
}

// decodeSIMD reads a 0xfd (fixed-width SIMD) instruction.
func decodeSIMD(r *reader) {
	switch sub := r.u32(); {
	case sub <= 11 || sub == 92 || sub == 93: // loads and stores
		r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		r.bytes(16)
	case sub >= 21 && sub <= 34: // extract and replace lane
		r.byte()
	case sub >= 84 && sub <= 91: // load and store lane
		r.memarg()
		r.byte()
	case sub <= 255:
	default:
		r.fail("unsupported SIMD instruction %d", sub)
	}
}

// reader decodes the binary format; the first error sticks and later reads return zero.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) done() bool { return r.err != nil || r.off >= len(r.b) }

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("unexpected end of data at offset %d", r.off)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("%d bytes at offset %d run past the end of their section", n, r.off)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// uleb reads an unsigned LEB128 number of at most bits bits.
func (r *reader) uleb(bits uint) uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= bits {
			r.fail("integer at offset %d is too long", r.off-1)
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) u32() uint32 {
	v := r.uleb(32)
	if v > 1<<32-1 {
		r.fail("integer at offset %d does not fit in 32 bits", r.off)
	}
	return uint32(v)
}

// sleb skips a signed LEB128 number of at most bits bits.
func (r *reader) sleb(bits uint) {
	for shift := uint(0); ; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return
		}
		if shift >= bits {
			r.fail("integer at offset %d is too long", r.off-1)
			return
		}
		if c&0x80 == 0 {
			return
		}
	}
}

func (r *reader) s33() { r.sleb(33) }

func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 { // multi-memory: a memory index follows
		r.u32()
	}
	r.uleb(64) // offset (64 bits with memory64)
}

func (r *reader) name() string { return string(r.bytes(int(r.u32()))) }

func (r *reader) limits() {
	flags := r.byte()
	r.uleb(64)
	if flags&1 != 0 {
		r.uleb(64)
	}
}

func appendU32(b []byte, v uint32) []byte { return leb128.AppendUnsigned(b, uint64(v)) }

func appendS64(b []byte, v int64) []byte { return leb128.AppendSigned(b, v) }

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
