package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// On pgflow 0.13.2+, requeue_stalled_tasks() takes back a task started longer ago than its
// FLOW's timeout plus 30 s, whatever the step's own timeout. A step allowed to run longer
// than that must not run twice: the worker keeps its long tasks locked against it. Here the
// task's start is moved an hour back and pgflow's function is called while it runs.
func TestUpstreamRequeueNeverTakesALiveWorkersLongTask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		guardAfter  time.Duration
		wantRequeue int
	}{
		{"guarded", 300 * time.Millisecond, 0},
		{"without the guard, upstream takes it", -1, 1}, // the hazard is real
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			ctx := context.Background()
			var hasRequeue bool
			if err := db.Pool.QueryRow(ctx, `select to_regproc('pgflow.requeue_stalled_tasks') is not null`).Scan(&hasRequeue); err != nil {
				t.Fatal(err)
			}
			if !hasRequeue {
				t.Skip("needs pgflow 0.13.2+ (requeue_stalled_tasks): run with PGFLOW_WASM_MIGRATIONS=../shared/pgflow/0.14.1/migrations, as `make test-pgflow-014` does")
			}
			f := flows(t, `
flows:
  - slug: long
    max_attempts: 1
    timeout: 1
    steps:
      - {slug: o, module: "{{oracle}}", timeout: 120}
`)
			startWorker(t, db.Pool, f, worker.Config{RequeueGuardInterval: 100 * time.Millisecond, RequeueGuardAfter: tc.guardAfter,
				StalledMargin: 24 * time.Hour, DrainTimeout: time.Second}) // only upstream may take the task here
			id := startRun(t, db.Pool, "long", `{"iterations": 10000000000}`) // about 5 s of work on wazero
			waitFor(t, 30*time.Second, func() (bool, string) {
				var started bool
				_ = db.Pool.QueryRow(ctx, `select status = 'started' and started_at < now() - interval '1 second'
					from pgflow.step_tasks where run_id = $1::uuid`, id).Scan(&started)
				return started, "the task has not been running for a second"
			})
			if _, err := db.Pool.Exec(ctx, `update pgflow.step_tasks set queued_at = queued_at - interval '1 hour',
				started_at = started_at - interval '1 hour' where run_id = $1::uuid`, id); err != nil {
				t.Fatal(err)
			}
			var requeued int
			if err := db.Pool.QueryRow(ctx, `select pgflow.requeue_stalled_tasks()`).Scan(&requeued); err != nil {
				t.Fatal(err)
			}
			if requeued != tc.wantRequeue {
				t.Fatalf("requeue_stalled_tasks() took back %d tasks, want %d", requeued, tc.wantRequeue)
			}
			if tc.wantRequeue > 0 {
				return
			}
			r := waitRun(t, db.Pool, id, 2*time.Minute)
			if task := taskOf(t, db.Pool, id); r.Status != "completed" || task.Attempts != 1 {
				t.Errorf("run %s, task attempts %d: want completed by its first and only attempt", r.Status, task.Attempts)
			}
		})
	}
}
