package main

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

func TestSoftMemoryLimitHeadroomGrowsWithConcurrency(t *testing.T) {
	for _, c := range []struct {
		value       string
		concurrency int
		want        memoryLimit
	}{
		{"auto", 32, memoryLimit{floor: 40 << 20, headroom: 16 << 20}},
		{"auto", 256, memoryLimit{floor: 208 << 20, headroom: 72 << 20}},
		{"auto", 0, memoryLimit{floor: 16<<20 + 768<<10, headroom: 8<<20 + 256<<10}},
		{"96MiB", 32, memoryLimit{floor: 96 << 20}},
		{"0", 32, memoryLimit{}},
	} {
		got, err := parseMemoryLimit(c.value, c.concurrency)
		if err != nil || got != c.want {
			t.Errorf("parseMemoryLimit(%q, %d) = %+v, %v; want %+v", c.value, c.concurrency, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "lots", "-1", "2TiB"} {
		if _, err := parseMemoryLimit(bad, 32); err == nil {
			t.Errorf("parseMemoryLimit(%q) was accepted", bad)
		}
	}
}

// auto follows the live heap: however much the process holds, the limit stays at least the
// headroom above it (a fixed limit under live data would keep the collector running flat
// out), and the limit before comes back when serve ends.
func TestSoftMemoryLimitFollowsTheLiveHeap(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	l := memoryLimit{floor: 16 << 20, headroom: 8 << 20}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.hold(ctx)
	}()
	held := make([][]byte, 0, 64)
	for range 64 {
		held = append(held, make([]byte, 1<<20)) // 64 MiB live
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		debug.FreeOSMemory() // a collection: the live heap is measured again
		limit := debug.SetMemoryLimit(-1)
		if limit >= 64<<20+8<<20 && limit < 1<<40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the limit is %d bytes with 64 MiB live, want at least the live heap plus 8 MiB", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("after serve the limit is %d, want the one before (%d)", got, before)
	}
	_ = held[63][0]
}

// serve refuses a bad --soft-memory-limit before it touches the database.
func TestServeRefusesABadSoftMemoryLimit(t *testing.T) {
	out, err := runCLI(t, "serve", "--database-url", "postgres://nowhere.invalid/db", "--soft-memory-limit", "lots")
	var exit cli.ExitCoder
	if err == nil || !strings.Contains(err.Error(), `--soft-memory-limit: "lots" is not auto`) || !asExit(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("serve --soft-memory-limit lots: %v (%s), want exit 2 naming the flag", err, out)
	}
}
