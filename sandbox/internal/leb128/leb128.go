// Package leb128 writes and reads the LEB128 numbers of the WebAssembly binary format, for
// the sandbox's packages that rewrite modules (the instrumenter, the JavaScript engine's
// snapshots).
package leb128

import "errors"

// AppendUnsigned appends v in unsigned LEB128.
func AppendUnsigned(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// AppendSigned appends v in signed LEB128.
func AppendSigned(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// ReadSigned reads a signed LEB128 number of at most 64 bits from the start of b and
// returns it with the number of bytes it took.
func ReadSigned(b []byte) (int64, int, error) {
	var v int64
	var shift uint
	for i, c := range b {
		if i == 10 {
			break
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("a malformed signed LEB128 number")
}
