package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// `missed: one`: a worker that comes back after ticks no worker ran starts one run for the
// latest of them; `missed: none` (the default) starts none.
func TestMissedTicksGetOneCatchUpRunWhenAsked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		missed string
		runs   int
	}{{"one", 1}, {"none", 0}} {
		t.Run(c.missed, func(t *testing.T) {
			t.Parallel()
			// A minute boundary between `started` and the worker's catch-up would make the
			// latest missed tick the schedule's own (CI saw it once): start clear of one.
			if untilNext := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); untilNext < 15*time.Second {
				time.Sleep(untilNext + time.Second)
			}
			db := pgtest.NewDB(t)
			ctx := context.Background()
			if err := schedule.EnsureTable(ctx, db.Pool); err != nil {
				t.Fatal(err)
			}
			// The last tick a worker ran was 10 minutes ago: 9 or 10 ticks were missed since.
			lastRan := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
			if _, err := db.Pool.Exec(ctx, `insert into pgflow_wasm.schedule_ticks (flow_slug, tick) values ('hourly', $1)`, lastRan); err != nil {
				t.Fatal(err)
			}
			f := flows(t, `
flows:
  - slug: hourly
    schedule: {cron: "* * * * *", missed: `+c.missed+`}
    steps: [{slug: s, module: "{{echo}}"}]
`)
			started := time.Now() // ticks from here on are the schedule's own, not catch-ups
			startWorker(t, db.Pool, f, worker.Config{})
			time.Sleep(3 * time.Second)
			var runs int
			var latest time.Time
			if err := db.Pool.QueryRow(ctx, `select count(*), coalesce(max(tick), 'epoch') from pgflow_wasm.schedule_ticks
				where flow_slug = 'hourly' and tick > $1 and tick < $2 and run_id is not null`, lastRan, started).Scan(&runs, &latest); err != nil {
				t.Fatal(err)
			}
			if runs != c.runs {
				t.Fatalf("%d catch-up runs, want %d", runs, c.runs)
			}
			if runs == 1 && time.Since(latest) > time.Minute+5*time.Second {
				t.Errorf("the catch-up run is for %s, want the latest missed tick", latest)
			}
		})
	}
}
