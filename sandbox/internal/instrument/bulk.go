package instrument

// The bodies of the functions that replace memory.fill and memory.copy (see the package
// comment). Both take (destination, value or source, length) like the instructions they
// replace; the rewrite adds their checkpoints like any function's.

// Opcodes of the helpers.
const (
	opLocalGet   = 0x20
	opLocalSet   = 0x21
	opI32Const   = 0x41
	opI32Eqz     = 0x45
	opI32LtU     = 0x49
	opI32LeU     = 0x4d
	opI32Add     = 0x6a
	opI32Sub     = 0x6b
	opI64GtU     = 0x56
	opI64Add     = 0x7c
	opI64ExtendU = 0xad
	opSelect     = 0x1b
	opReturn     = 0x0f
	opBr         = 0x0c
	opBrIf       = 0x0d
)

var (
	memoryFill = []byte{0xfc, 11, 0}
	memoryCopy = []byte{0xfc, 10, 0, 0}
)

// asm assembles a body from opcodes and byte slices.
func asm(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case int:
			b = append(b, byte(v))
		case []byte:
			b = append(b, v...)
		}
	}
	return b
}

func get(i int) []byte { return []byte{opLocalGet, byte(i)} }
func set(i int) []byte { return []byte{opLocalSet, byte(i)} }

func i32(v int64) []byte { return appendS64([]byte{opI32Const}, v) }

// wraps leaves 1 when a + n does not fit in 32 bits (the operation then traps anyway).
func wraps(a, n int) []byte {
	return asm(get(a), opI64ExtendU, get(n), opI64ExtendU, opI64Add, appendS64([]byte{opI64Const}, 0xffffffff), opI64GtU)
}

// chunk sets local c to min(n, bulkChunk).
func chunk(n, c int) []byte {
	return asm(get(n), i32(bulkChunk), get(n), i32(bulkChunk), opI32LtU, opSelect, set(c))
}

// fillHelper: (d, v, n) with local c.
func fillHelper() []byte {
	const d, v, n, c = 0, 1, 2, 3
	return asm(1, 1, 0x7f, // one local: i32
		// Small: the instruction itself.
		get(n), i32(bulkChunk), opI32LeU, opIf, 0x40, get(d), get(v), get(n), memoryFill, opReturn, opEnd,
		// Out of bounds: the instruction itself traps.
		wraps(d, n), opIf, 0x40, get(d), get(v), get(n), memoryFill, opReturn, opEnd,
		get(d), get(n), opI32Add, get(v), i32(0), memoryFill, // traps unless d+n is in bounds
		opBlock, 0x40, opLoop, 0x40,
		get(n), opI32Eqz, opBrIf, 1,
		chunk(n, c),
		get(d), get(v), get(c), memoryFill,
		get(d), get(c), opI32Add, set(d),
		get(n), get(c), opI32Sub, set(n),
		opBr, 0, opEnd, opEnd, opEnd)
}

// copyHelper: (d, s, n) with local c; forward when d <= s, backward otherwise, so
// overlapping ranges copy as memory.copy does.
func copyHelper() []byte {
	const d, s, n, c = 0, 1, 2, 3
	return asm(1, 1, 0x7f,
		get(n), i32(bulkChunk), opI32LeU, opIf, 0x40, get(d), get(s), get(n), memoryCopy, opReturn, opEnd,
		wraps(d, n), wraps(s, n), 0x72 /* i32.or */, opIf, 0x40, get(d), get(s), get(n), memoryCopy, opReturn, opEnd,
		get(d), get(n), opI32Add, get(s), get(n), opI32Add, i32(0), memoryCopy, // traps unless both ends are in bounds
		get(d), get(s), opI32LeU, opIf, 0x40,
		opBlock, 0x40, opLoop, 0x40, // forward
		get(n), opI32Eqz, opBrIf, 1,
		chunk(n, c),
		get(d), get(s), get(c), memoryCopy,
		get(d), get(c), opI32Add, set(d),
		get(s), get(c), opI32Add, set(s),
		get(n), get(c), opI32Sub, set(n),
		opBr, 0, opEnd, opEnd,
		opElse,
		opBlock, 0x40, opLoop, 0x40, // backward
		get(n), opI32Eqz, opBrIf, 1,
		chunk(n, c),
		get(n), get(c), opI32Sub, set(n),
		get(d), get(n), opI32Add, get(s), get(n), opI32Add, get(c), memoryCopy,
		opBr, 0, opEnd, opEnd,
		opEnd, opEnd)
}
