package worker_test

import (
	"context"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// A fetch whose reply was lost (the connection died after start_tasks committed) leaves a
// task started by a live worker that never heard of it: the worker puts it back in the queue
// and runs it, and no attempt is failed for it: with max_attempts 1 the run completes.
func TestATaskStartedByALostFetchReplyRunsWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: lost
    max_attempts: 1
    steps:
      - {slug: o, module: "{{oracle}}"}
`)
	// Polling, hour-long: after its first poll the worker only looks when something wakes it
	// (with notify, the run's insert would).
	w := startWorker(t, db.Pool, f, worker.Config{Signal: pgflowtype.SignalPolling, MinPollInterval: time.Hour, MaxPollInterval: time.Hour,
		RecoveryInterval: 200 * time.Millisecond})
	waitFor(t, time.Minute, func() (bool, string) {
		n := testutil.ToFloat64(w.Metrics.Polls.WithLabelValues("lost", "empty"))
		return n >= 1, "the worker's first poll did not come back empty"
	})
	id := startRun(t, db.Pool, "lost", `{"n": 1}`)
	var started int
	if err := db.Pool.QueryRow(ctx, `select count(*) from `+db.StartTasks(t, `'lost'`,
		`(select array_agg(msg_id) from pgmq.read('lost', 3600, 10))`, `$1::uuid`), w.WorkerIDs()["lost"]).Scan(&started); err != nil || started != 1 {
		t.Fatalf("starting the task as the worker: %v (%d started)", err, started)
	}
	r := waitRun(t, db.Pool, id, time.Minute)
	if r.Status != "completed" {
		t.Fatalf("run: %s (%s): a task whose handler never ran cost the run its only attempt", r.Status, r.Error)
	}
	// The lost start was given back: the start that ran it is attempt 1 again, as if it had
	// run in place, and no failure is recorded.
	task := taskOf(t, db.Pool, id)
	if task.Attempts != 1 || task.Error != "" {
		t.Errorf("attempt %d, error %q: want attempt 1, no failure recorded", task.Attempts, task.Error)
	}
}

// While outcomes cannot be written (here: another session holds every run row, which the
// completer must lock), the worker stops fetching once MaxUnwritten outcomes wait, instead of
// running ever more tasks whose results pile up in memory.
func TestUnwrittenOutcomesHoldBackFetching(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: held
    steps:
      - {slug: o, module: "{{oracle}}"}
`)
	const concurrency, maxUnwritten, runs = 4, 8, 100
	startWorker(t, db.Pool, f, worker.Config{Concurrency: concurrency, BatchSize: concurrency, MaxUnwritten: maxUnwritten})
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('held', '{}') from generate_series(1, $1)`, runs); err != nil {
		t.Fatal(err)
	}
	blocker, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `select run_id from pgflow.runs where flow_slug = 'held' for share`); err != nil {
		t.Fatal(err)
	}
	most := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		var started int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where flow_slug = 'held' and status = 'started'`).Scan(&started); err != nil {
			t.Fatal(err)
		}
		most = max(most, started)
	}
	// Started tasks are running (at most concurrency) or done and unwritten (MaxUnwritten),
	// plus at most one batch fetched while the last outcomes were queued.
	if most > concurrency+maxUnwritten+concurrency {
		t.Errorf("%d tasks were started while outcomes could not be written; the bound is %d", most, concurrency+maxUnwritten+concurrency)
	}
	if most < maxUnwritten {
		t.Errorf("only %d tasks started: the completer was never held back, the test proves nothing", most)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() (bool, string) {
		var done int
		_ = db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'held' and status = 'completed'`).Scan(&done)
		return done == runs, fmt.Sprintf("%d of %d runs completed after the block", done, runs)
	})
}
