package sandbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// clockProbe runs clock_probe.wasm: realtime, monotonic, a 100 ms sleep, monotonic again.
func clockProbe(t *testing.T, m sandbox.Module, tk sandbox.Task) (real, mono, monoAfter time.Duration) {
	t.Helper()
	res, err := m.Run(context.Background(), tk)
	if err != nil {
		t.Fatal(err)
	}
	var r [5]uint64
	if err := json.Unmarshal(res.Output, &r); err != nil {
		t.Fatalf("%s: %v", res.Output, err)
	}
	if r[3] != 0 || r[4] != 1 {
		t.Fatalf("poll_oneoff: errno %d, %d events; want 0 and 1 (output %s)", r[3], r[4], res.Output)
	}
	return time.Duration(r[0]), time.Duration(r[1]), time.Duration(r[2])
}

// A guest reads the host's clocks on both engines: realtime is the wall clock (checked with a
// minute's margin, which holds on a loaded machine), monotonic never goes back, within a task
// or across the tasks of a reused instance, and a sleep waits. With FixedClock (flows.yaml
// `deterministic: true`) it reads the fixed clock of 2022-01-01 and sleeps do not wait.
func TestGuestsReadTheHostClockUnlessFixed(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "clock_probe"), sandbox.ModuleConfig{ReuseInstance: true})
		var lastMono time.Duration
		for i := range 3 {
			before := time.Now()
			real, mono, after := clockProbe(t, m, task(`{}`, time.Minute))
			wall := time.Unix(0, int64(real))
			if d := wall.Sub(before); d < -time.Minute || d > time.Minute {
				t.Errorf("task %d: realtime %s, host time %s: want within a minute", i, wall.UTC(), before.UTC())
			}
			if mono < lastMono || after < mono {
				t.Errorf("task %d: monotonic went back: %s after %s, then %s", i, mono, lastMono, after)
			}
			if slept := after - mono; slept < 100*time.Millisecond {
				t.Errorf("task %d: a 100 ms sleep moved the monotonic clock by %s", i, slept)
			}
			lastMono = after
		}

		fixed := task(`{}`, time.Minute)
		fixed.FixedClock = true
		f := load(t, e, testModule(t, "clock_probe"), sandbox.ModuleConfig{})
		began := time.Now()
		real, mono, after := clockProbe(t, f, fixed)
		took := time.Since(began)
		if epoch := time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC); time.Unix(0, int64(real)).Sub(epoch) > time.Second || time.Unix(0, int64(real)).Before(epoch) {
			t.Errorf("fixed clock: realtime %s, want 2022-01-01T00:00:00Z and a few ms", time.Unix(0, int64(real)).UTC())
		}
		if after-mono < 100*time.Millisecond || mono > time.Second {
			t.Errorf("fixed clock: monotonic %s then %s after a 100 ms sleep", mono, after)
		}
		t.Logf("a fixed-clock task with a 100 ms sleep took %s", took)

		// A sleep past the task's deadline ends the task as a timeout, at the deadline.
		_, err := m.Run(context.Background(), task(`{}`, 30*time.Millisecond))
		wantKind(t, err, sandbox.KindTimeout, "while the guest slept")
	})
}
