package flowfile

import (
	"testing"
	"time"
)

// An interval ticks at its multiples since the Unix epoch, whatever the time it is asked
// from, so workers started at different times share their ticks; a cron expression is as it
// was.
func TestAnIntervalTicksOnTheWallClock(t *testing.T) {
	t.Parallel()
	every, err := ParseSchedule("@every 10s", "Europe/Berlin", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ from, want time.Duration }{
		{0, 10 * time.Second},
		{3500 * time.Millisecond, 10 * time.Second},
		{9999 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, 20 * time.Second},
		{10*time.Second + 1, 20 * time.Second},
	} {
		if got := every.Next(base.Add(c.from)); !got.Equal(base.Add(c.want)) {
			t.Errorf("@every 10s: Next(%s) = %s, want %s", base.Add(c.from).Format(time.TimeOnly+".000"), got.UTC().Format(time.TimeOnly), base.Add(c.want).Format(time.TimeOnly))
		}
	}
	odd, err := ParseSchedule("@every 7m", "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []time.Time{base, base.Add(time.Second), base.Add(-time.Hour)} {
		if got := odd.Next(from); got.UnixNano()%int64(7*time.Minute) != 0 || !got.After(from) || got.Sub(from) > 7*time.Minute {
			t.Errorf("@every 7m: Next(%s) = %s, want the next multiple of 7 minutes since the epoch", from, got)
		}
	}
	cron, err := ParseSchedule("*/5 * * * *", "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := cron.Next(base.Add(time.Minute)); !got.Equal(base.Add(5 * time.Minute)) {
		t.Errorf("*/5: Next = %s", got)
	}
}
