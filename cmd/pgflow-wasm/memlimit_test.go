package main

import "testing"

func TestSoftMemoryLimitGrowsWithConcurrency(t *testing.T) {
	for _, c := range []struct {
		value       string
		concurrency int
		want        int64
	}{
		{"auto", 32, 40 << 20},
		{"auto", 256, 208 << 20},
		{"auto", 0, 16<<20 + 768<<10},
		{"96MiB", 32, 96 << 20},
		{"0", 32, 0},
	} {
		got, err := softMemoryLimit(c.value, c.concurrency)
		if err != nil || got != c.want {
			t.Errorf("softMemoryLimit(%q, %d) = %d, %v; want %d", c.value, c.concurrency, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "lots", "-1", "2TiB"} {
		if _, err := softMemoryLimit(bad, 32); err == nil {
			t.Errorf("softMemoryLimit(%q) was accepted", bad)
		}
	}
}
