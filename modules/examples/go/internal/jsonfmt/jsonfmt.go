// Package jsonfmt writes the canonical JSON output every example language shares, so that
// the same input gives the same output bytes whichever language built the handler: no
// spaces, strings escaped as RFC 8785 does (only '"', '\' and control characters), numbers
// as ECMAScript's Number.prototype.toString prints them (also RFC 8785): 6,
// 0.30000000000000004, 1.5e-7, 1e+21. encoding/json differs on both counts (it escapes
// <, >, &, U+2028 and prints 1e+21 as 1e+21 but 1e-7 as 1e-07).
package jsonfmt

import (
	"strconv"
	"strings"
)

// Quote returns s as a JSON string.
func Quote(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Number returns x as a JSON number, or false when x is not finite (JSON has neither NaN
// nor infinities).
func Number(x float64) (string, bool) {
	if x != x || x > 1.7976931348623157e308 || x < -1.7976931348623157e308 {
		return "", false
	}
	if x == 0 {
		return "0", true // also -0, as ECMAScript prints it
	}
	// 'e' with precision -1 gives the shortest digits that read back as x: "-1.2345e-07".
	sci := strconv.FormatFloat(x, 'e', -1, 64)
	sign := ""
	if sci[0] == '-' {
		sign, sci = "-", sci[1:]
	}
	mantissa, exp, _ := strings.Cut(sci, "e")
	digits := strings.Replace(mantissa, ".", "", 1)
	e, _ := strconv.Atoi(exp)
	k, n := len(digits), e+1 // x = 0.digits * 10^n
	var body string
	switch {
	case k <= n && n <= 21:
		body = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		body = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		body = "0." + strings.Repeat("0", -n) + digits
	default:
		body = digits[:1]
		if k > 1 {
			body += "." + digits[1:]
		}
		if n-1 >= 0 {
			body += "e+" + strconv.Itoa(n-1)
		} else {
			body += "e-" + strconv.Itoa(1-n)
		}
	}
	return sign + body, true
}
