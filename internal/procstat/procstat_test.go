package procstat_test

import (
	"os"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/procstat"
)

func TestOwnProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	pid := os.Getpid()
	// Burn some CPU so the clock-tick counters cannot all read zero.
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = n * n
	}
	cpu, err := procstat.CPU(pid)
	if err != nil || cpu <= 0 {
		t.Errorf("CPU = %v, %v; want more than zero after 50 ms of work", cpu, err)
	}
	rss, err := procstat.RSS(pid)
	if err != nil || rss <= 0 {
		t.Errorf("RSS = %d, %v", rss, err)
	}
	peak, err := procstat.PeakRSS(pid)
	if err != nil || peak < rss {
		t.Errorf("PeakRSS = %d, %v; want at least RSS %d", peak, err, rss)
	}
	if _, err := procstat.RSS(-1); err == nil {
		t.Error("RSS of a process that cannot exist: no error")
	}
}
