package worker_test

import (
	"context"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/fetchlease"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// statusCounts counts a flow's tasks by status.
func statusCounts(t *testing.T, db *pgtest.DB, flow string) (queued, completed int) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), `select count(*) filter (where status = 'queued'),
		count(*) filter (where status = 'completed') from pgflow.step_tasks where flow_slug = $1`, flow).Scan(&queued, &completed); err != nil {
		t.Fatal(err)
	}
	return queued, completed
}

func TestAWorkerWithoutALeaseLeavesTheQueueToTheHolder(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: leased
    steps: [{slug: a, module: "{{echo}}"}]
`)
	// The test is the other worker: it holds the queue's only lease.
	holder := fetchlease.New(fetchlease.Config{Pool: db.Pool, Slots: 1})
	defer holder.Close(ctx)
	if got, err := holder.Acquire(ctx, "leased"); err != nil || !got {
		t.Fatalf("taking the lease: %v, %v", got, err)
	}
	w := startWorker(t, db.Pool, f, fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: pgflowtype.SignalPolling,
		FetchLeases: 1, Concurrency: 1, BatchSize: 1}))
	<-w.Started()
	for i := range 4 {
		startRun(t, db.Pool, "leased", fmt.Sprintf(`{"n": %d}`, i))
	}
	time.Sleep(time.Second) // many of the worker's polls (fastConfig: every 20-200 ms)
	if q, c := statusCounts(t, db, "leased"); q != 4 || c != 0 {
		t.Fatalf("without a lease the worker read the queue: %d queued, %d completed; want 4 and 0", q, c)
	}
	if err := holder.Release(ctx, "leased"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		q, c := statusCounts(t, db, "leased")
		return c == 4, fmt.Sprintf("after the lease was given back: %d queued, %d completed", q, c)
	})
}

func TestAHolderWhoseHandlersAreTheLimitLetsAnotherWorkerRead(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flowsFile(t, `
flows:
  - slug: slow
    timeout: 60
    steps: [{slug: a, module: "{{work}}"}]
`, map[string]string{"work": "modules/testdata/work.wasm"})
	// Two workers of one task at a time, and one lease: a holder whose single slot is taken
	// by a handler much slower than its fetch gives the lease back at once, so the other
	// worker reads too, instead of waiting for the holder's queue to run dry.
	//
	// "Much slower" must hold on a loaded machine: with 0.15 s handlers this once failed in
	// CI (10 tasks and 0), where the race detector and other packages' databases slowed a
	// fetch enough that the holder stopped counting as bound by its handlers (handlerBound)
	// and held the lease through most of each task, while the other worker, refused, asked at
	// most once a second (maxLeaseRetry). Handlers of 0.6 s are bound unless a fetch takes
	// 0.3 s, and the whole backlog outlasts several of those asks.
	cfg := fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: pgflowtype.SignalPolling,
		FetchLeases: 1, Concurrency: 1, BatchSize: 1})
	a := startWorker(t, db.Pool, f, cfg)
	b := startWorker(t, db.Pool, f, cfg)
	<-a.Started()
	<-b.Started()
	const runs = 8
	for range runs {
		startRun(t, db.Pool, "slow", `{"iterations": 1200000000}`) // about 0.6 s each
	}
	waitFor(t, 60*time.Second, func() (bool, string) {
		q, c := statusCounts(t, db, "slow")
		return c == runs, fmt.Sprintf("%d queued, %d completed", q, c)
	})
	rows, err := db.Pool.Query(context.Background(), `select count(*) from pgflow.step_tasks
		where flow_slug = 'slow' group by last_worker_id order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	var perWorker []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		perWorker = append(perWorker, n)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	// A holder that kept its lease would have run every task (9 and 1 when that was tried,
	// while the first read of an idle queue needed no lease).
	if len(perWorker) != 2 || perWorker[0] < 2 {
		t.Fatalf("tasks per worker %v: the lease did not change hands while handlers were the limit", perWorker)
	}
}

func TestAnIdleQueueHoldsNoLease(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: idle_lease
    steps: [{slug: a, module: "{{echo}}"}]
`)
	w := startWorker(t, db.Pool, f, fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: pgflowtype.SignalPolling, FetchLeases: 1}))
	<-w.Started()
	id := startRun(t, db.Pool, "idle_lease", `{}`)
	if r := waitRun(t, db.Pool, id, 10*time.Second); r.Status != "completed" {
		t.Fatalf("run %s", r.Status)
	}
	// Its queue empty again, the worker gives its lease back at its next read.
	other := fetchlease.New(fetchlease.Config{Pool: db.Pool, Slots: 1})
	defer other.Close(ctx)
	waitFor(t, 5*time.Second, func() (bool, string) {
		got, err := other.Acquire(ctx, "idle_lease")
		if err != nil {
			t.Fatal(err)
		}
		return got, "the idle worker still holds the queue's lease"
	})
}

// By default (FetchLeases 0) a worker alone reads without a lease once its sweeps have
// counted its peers twice, and keeps no lease session; once a second live worker serves the
// flow, both read only with a lease.
func TestLeasesTakeHoldOnTheirOwnOnceASecondWorkerServesTheFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: auto_lease
    steps: [{slug: a, module: "{{echo}}"}]
`)
	// The test holds the queue's only lease throughout, as a third worker would.
	holder := fetchlease.New(fetchlease.Config{Pool: db.Pool, Slots: 1})
	defer holder.Close(ctx)
	if got, err := holder.Acquire(ctx, "auto_lease"); err != nil || !got {
		t.Fatalf("taking the lease: %v, %v", got, err)
	}
	cfg := fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: pgflowtype.SignalPolling})
	a := startWorker(t, db.Pool, f, cfg)
	<-a.Started()
	id := startRun(t, db.Pool, "auto_lease", `{}`)
	if r := waitRun(t, db.Pool, id, 10*time.Second); r.Status != "completed" {
		t.Fatalf("a worker alone waited for a lease: run %s", r.Status)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		var sessions int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and application_name = 'pgflow-wasm fetch leases'`).Scan(&sessions); err != nil {
			t.Fatal(err)
		}
		return sessions == 1, fmt.Sprintf("%d lease sessions, want only the test's: a worker alone keeps none", sessions)
	})

	b := startWorker(t, db.Pool, f, cfg)
	<-b.Started()
	// Each worker's sweeps (fastConfig: every second, every two with two readers) count
	// the other.
	time.Sleep(3 * time.Second)
	for i := range 3 {
		startRun(t, db.Pool, "auto_lease", fmt.Sprintf(`{"n": %d}`, i))
	}
	time.Sleep(time.Second)
	if q, _ := statusCounts(t, db, "auto_lease"); q != 3 {
		t.Fatalf("two workers read without the lease: %d of 3 tasks still queued", q)
	}
	if err := holder.Release(ctx, "auto_lease"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		q, c := statusCounts(t, db, "auto_lease")
		return c == 4, fmt.Sprintf("after the lease was given back: %d queued, %d completed", q, c)
	})
}
