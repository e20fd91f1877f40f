package leb128_test

import (
	"math"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/leb128"
)

// Numbers at the edges of each byte length read back as they were written, and the
// encodings are the WebAssembly specification's examples.
func TestNumbersReadBackAsWritten(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, 127, 128, 8191, -8192, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64} {
		b := leb128.AppendSigned(nil, v)
		got, n, err := leb128.ReadSigned(b)
		if err != nil || got != v || n != len(b) {
			t.Errorf("%d: wrote % x, read %d in %d bytes, %v", v, b, got, n, err)
		}
	}
	if b := leb128.AppendSigned(nil, -123456); string(b) != "\xc0\xbb\x78" {
		t.Errorf("-123456 = % x, want c0 bb 78", b)
	}
	if b := leb128.AppendUnsigned(nil, 624485); string(b) != "\xe5\x8e\x26" {
		t.Errorf("624485 = % x, want e5 8e 26", b)
	}
	if _, _, err := leb128.ReadSigned([]byte{0x80, 0x80}); err == nil {
		t.Error("an unterminated number read without an error")
	}
}
