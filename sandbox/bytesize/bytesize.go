// Package bytesize reads and writes byte counts the way users write them: flows.yaml and
// flags take "32MiB", "512KiB", "1GiB" or a plain number of bytes; messages say "1.5 KiB".
// It lives under sandbox, whose limits it spells, so that sandbox and flowfile import
// nothing from internal/ (which stands above them).
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	size   uint64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// Parse reads "32MiB", "512KiB", "1GiB", "2 MiB" or a plain byte count, up to 1 TiB.
func Parse(s string) (uint64, bool) {
	s = strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.size
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > (1<<40)/mult {
		return 0, false
	}
	return n * mult, true
}

// Flag writes a count so that Parse reads it back: "64MiB", or "1000 bytes".
func Flag(n uint64) string {
	for _, u := range units {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// Text writes a count for a message: "8 MiB", "1.50 MiB", "1.5 KiB", "12 bytes".
func Text(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
