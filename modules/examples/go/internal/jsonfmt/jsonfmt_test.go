package jsonfmt

import (
	"encoding/json"
	"math"
	"math/rand"
	"strconv"
	"testing"
)

func TestNumberPrintsAsECMAScript(t *testing.T) {
	t.Parallel()
	cases := []struct {
		x    float64
		want string
	}{
		{6, "6"},
		{math.Copysign(0, -1), "0"},
		{0.30000000000000004, "0.30000000000000004"}, // 0.1 + 0.2 in doubles
		{1.5, "1.5"},
		{-2.25, "-2.25"},
		{123456789012345680000, "123456789012345680000"},
		{1e21, "1e+21"},
		{1.5e300, "1.5e+300"},
		{0.000001, "0.000001"},
		{1.5e-7, "1.5e-7"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{9007199254740993, "9007199254740992"},
	}
	for _, c := range cases {
		if got, ok := Number(c.x); !ok || got != c.want {
			t.Errorf("Number(%g) = %q, %v; want %q", c.x, got, ok, c.want)
		}
	}
	for _, x := range []float64{math.Inf(1), math.Inf(-1), math.NaN()} {
		if got, ok := Number(x); ok {
			t.Errorf("Number(%g) = %q, want not ok", x, got)
		}
	}
}

// Every formatted number must read back as the same double.
func TestNumberRoundTrips(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 100000; i++ {
		x := math.Float64frombits(r.Uint64())
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		s, _ := Number(x)
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != x {
			t.Fatalf("Number(%v) = %q reads back as %v (%v)", x, s, back, err)
		}
	}
}

func TestQuoteEscapesOnlyQuotesBackslashesAndControls(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"Ada":                           `"Ada"`,
		`a"b\c/d`:                       `"a\"b\\c/d"`,
		"\b\t\n\f\r\x01\x1f\x7f":        `"\b\t\n\f\r\u0001\u001f` + "\x7f\"",
		"<é\u2028😀>":                    "\"<é\u2028😀>\"",
		"":                              `""`,
		"line1\nline2 \"quoted\" \\ ok": `"line1\nline2 \"quoted\" \\ ok"`,
	}
	for in, want := range cases {
		got := Quote(in)
		if got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil || back != in {
			t.Errorf("Quote(%q) = %s does not decode back (%v)", in, got, err)
		}
	}
}
