package worker_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// idleTransactionsPerFlow is the most an idle worker may cost a database per flow it serves,
// with the default settings. A quiet machine sees 1.4-3.2 a second (the fallback poll, the
// heartbeat, the sweeps and the pgflow watch); a loaded one, where the statistics of several
// seconds can land in one window, up to 6.4; a hot loop, the bug this catches, thousands.
const idleTransactionsPerFlow = 20.0

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
	// Every case's worker is idle at once, each on a database of its own: the waiting is
	// what this test costs, and subtests would wait in turn (go test runs as many parallel
	// tests at once as the machine has cores).
	type idle struct {
		name  string
		flows int
		conn  *pgx.Conn
		rate  float64
	}
	var idles []*idle
	for _, c := range cases {
		db := pgtest.NewDB(t)
		f := flows(t, c.yaml)
		// The defaults a user gets, not the tests' quick settings.
		cfg := worker.Config{Signal: c.signal, Concurrency: c.concurrency}.WithDefaults()
		w := startWorker(t, db.Pool, f, cfg)
		<-w.Started()
		if c.prepare != nil {
			c.prepare(t, db)
		}
		idles = append(idles, &idle{name: c.name, flows: c.flows, conn: db.Conn(t), rate: math.Inf(1)})
	}
	count := func(c *idle) int64 {
		var n int64
		if err := c.conn.QueryRow(context.Background(), `select xact_commit + xact_rollback from pg_stat_database
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
	for window := range 2 {
		before, began := make([]int64, len(idles)), make([]time.Time, len(idles))
		for i, c := range idles {
			before[i], began[i] = count(c), time.Now()
		}
		time.Sleep(10 * time.Second)
		for i, c := range idles {
			// Each read is a transaction of its own: one of them is the window's.
			after, took := count(c), time.Since(began[i])
			r := float64(after-before[i]-1) / took.Seconds() / float64(c.flows)
			t.Logf("%s, window %d: %.2f transactions/s per flow (%d in %s)", c.name, window+1, r, after-before[i]-1, took.Round(time.Millisecond))
			c.rate = min(c.rate, r)
		}
	}
	for _, c := range idles {
		if c.rate > idleTransactionsPerFlow {
			t.Errorf("%s: idle worker: %.1f transactions/s per flow, want at most %.0f", c.name, c.rate, idleTransactionsPerFlow)
		}
	}
}
