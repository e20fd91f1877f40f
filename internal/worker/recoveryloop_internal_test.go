package worker

import (
	"testing"
	"time"
)

func TestSweepsSpreadOverTheWorkersThatShareThem(t *testing.T) {
	for _, c := range []struct {
		base     time.Duration
		shared   int
		min, max time.Duration
	}{
		{2 * time.Second, 1, 2 * time.Second, 2 * time.Second}, // alone: the interval as set
		{2 * time.Second, 4, 6 * time.Second, 10 * time.Second},
		{2 * time.Second, 16, 22500 * time.Millisecond, 37500 * time.Millisecond}, // at most 30 s, ±25%
		{time.Hour, 3, 45 * time.Minute, 75 * time.Minute},                        // a longer interval is kept
	} {
		for range 100 {
			if got := sweepInterval(c.base, c.shared); got < c.min || got > c.max {
				t.Fatalf("sweepInterval(%s, %d) = %s, want within [%s, %s]", c.base, c.shared, got, c.min, c.max)
			}
		}
	}
}
