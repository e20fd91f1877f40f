package worker_test

import (
	"context"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"math"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// idleTransactionsPerFlow is the most an idle worker may cost a database per flow it serves,
// with the default settings (docs/benchmarks.md measures about 0.4 with --signal notify).
const idleTransactionsPerFlow = 5.0

// TestIdleWorkerTransactionRate serves flows files covering every option that changes how a
// worker fetches, with no work to do, and counts the database's transactions
// (pg_stat_database) over a window. A worker with max_concurrency once read its empty queue
// thousands of times a second: giving back the slots of an empty fetch woke its own loop.
func TestIdleWorkerTransactionRate(t *testing.T) {
	if testing.Short() {
		t.Skip("measures an idle worker for 20 s")
	}
	t.Parallel()
	cases := []struct {
		name        string
		signal      pgflowtype.Signal
		concurrency int
		yaml        string
		flows       int
		// prepare starts the runs that leave nothing to do (delayed starts, retries far off).
		prepare func(t *testing.T, db *pgtest.DB)
	}{
		{name: "polling", signal: pgflowtype.SignalPolling, flows: 1, yaml: `
flows:
  - slug: idle_plain
    steps: [{slug: a, module: "{{echo}}"}]
`},
		{name: "notify", signal: pgflowtype.SignalNotify, flows: 1, yaml: `
flows:
  - slug: idle_notify
    steps: [{slug: a, module: "{{echo}}"}]
`},
		{name: "max_concurrency/polling", signal: pgflowtype.SignalPolling, flows: 1, yaml: `
flows:
  - slug: idle_limited
    max_concurrency: 4
    steps: [{slug: a, module: "{{echo}}"}]
`},
		{name: "max_concurrency/notify", signal: pgflowtype.SignalNotify, flows: 1, yaml: `
flows:
  - slug: idle_limited_notify
    max_concurrency: 1
    steps: [{slug: a, module: "{{echo}}"}]
`},
		{name: "concurrency_below_batch", signal: pgflowtype.SignalPolling, concurrency: 2, flows: 2, yaml: `
flows:
  - slug: idle_small_a
    max_concurrency: 1
    steps: [{slug: a, module: "{{echo}}"}]
  - slug: idle_small_b
    steps: [{slug: a, module: "{{echo}}"}]
`},
		{name: "delayed_runs", signal: pgflowtype.SignalNotify, flows: 2, yaml: `
flows:
  - slug: idle_delayed
    max_concurrency: 2
    steps: [{slug: a, start_delay: 3600, module: "{{echo}}"}]
  - slug: idle_retrying
    max_attempts: 3
    base_delay: 3600
    steps: [{slug: a, module: "{{fail}}"}]
`, prepare: func(t *testing.T, db *pgtest.DB) {
			for range 3 {
				startRun(t, db.Pool, "idle_delayed", `{}`)
			}
			id := startRun(t, db.Pool, "idle_retrying", `{}`)
			// Idle means the retry waits its hour: the first attempt has failed.
			waitFor(t, 30*time.Second, func() (bool, string) {
				var n int
				_ = db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.step_tasks
					where run_id = $1 and status = 'queued' and attempts_count = 1`, id).Scan(&n)
				return n == 1, "the first attempt has not failed yet"
			})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			f := flows(t, c.yaml)
			// The defaults a user gets, not the tests' quick settings.
			cfg := worker.Config{Signal: c.signal, Concurrency: c.concurrency}.WithDefaults()
			w := startWorker(t, db.Pool, f, cfg)
			<-w.Started()
			if c.prepare != nil {
				c.prepare(t, db)
			}
			conn := db.Conn(t)
			count := func() int64 {
				var n int64
				if err := conn.QueryRow(context.Background(), `select xact_commit + xact_rollback from pg_stat_database
					where datname = current_database()`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			// Start-up traffic (registration, first polls and sweeps) settles; backends report
			// their counters within about 10 s of going idle, and later on a loaded machine, so
			// a late report of start-up can land in a window. The lower of two windows is the
			// idle rate: a hot loop costs thousands in every window.
			time.Sleep(8 * time.Second)
			rate := math.Inf(1)
			for window := range 2 {
				before, began := count(), time.Now()
				time.Sleep(10 * time.Second)
				after, took := count(), time.Since(began)
				r := float64(after-before-1) / took.Seconds() / float64(c.flows)
				t.Logf("%s, window %d: %.2f transactions/s per flow (%d in %s)", c.name, window+1, r, after-before-1, took.Round(time.Millisecond))
				rate = min(rate, r)
			}
			if rate > idleTransactionsPerFlow {
				t.Errorf("idle worker: %.1f transactions/s per flow, want at most %.0f", rate, idleTransactionsPerFlow)
			}
		})
	}
}
