package reference_test

import (
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// pgflow's TypeScript worker has no handler timeout and heartbeats only between batches, so a
// slow handler of its own keeps a task started long past the step timeout while it is alive.
// pgflow-wasm's stalled-task sweep, sharing the flow, must leave that task alone: taking it
// back would run it twice and, with max_attempts 1, fail the whole run.
func TestTheSweepLeavesALiveTypeScriptWorkersTasksAlone(t *testing.T) {
	t.Parallel()
	root := setup(t)
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, `
flows:
  - slug: shared
    max_attempts: 1
    timeout: 1
    steps:
      - {slug: s, module: "{{root}}/modules/testdata/oracle.wasm"}
`, nil)
	// pgflow-wasm's flow; the TypeScript worker takes the first runs, each handler taking
	// 5 s: past the 1 s timeout plus the sweep's 1 s margin.
	workertest.Compile(t, db.Pool, file)
	execSQL(t, db, `select pgflow.start_flow('shared', jsonb_build_object('i', i)) from generate_series(1, 4) i`)
	ts := startWorker(t, root, db.URL, "shared", "--handler-ms", "5000", "--vt", "30")
	deadline := time.Now().Add(time.Minute)
	for countWhere(t, db, `select count(*) from pgflow.step_tasks where status = 'started' and last_worker_id = $1`, ts.id) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("the TypeScript worker did not start the runs; stderr:\n%s", ts.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	workertest.StartWorker(t, db.Pool, file, worker.Config{Concurrency: 4, StalledMargin: time.Second, RecoveryInterval: 200 * time.Millisecond})
	// More runs, for pgflow-wasm, while the TypeScript handlers sleep on.
	execSQL(t, db, `select pgflow.start_flow('shared', jsonb_build_object('i', i)) from generate_series(5, 8) i`)
	waitRuns(t, db, ts, "shared", "completed", 8)
	if n := countWhere(t, db, `select count(*) from pgflow.step_tasks
		where flow_slug = 'shared' and status = 'completed' and attempts_count = 1 and last_worker_id = $1`, ts.id); n != 4 {
		t.Errorf("%d of the TypeScript worker's 4 tasks completed in its one attempt", n)
	}
	// A task the sweep takes back is requeued, with no error on pgflow's row: the attempt
	// history keeps the reason.
	if n := countWhere(t, db, `select count(*) from pgflow_wasm.task_attempts a join pgflow.step_tasks st using (run_id, step_slug, task_index)
		where st.flow_slug = 'shared' and a.error_message like 'Task stalled%'`); n != 0 {
		t.Errorf("the sweep took back %d tasks of a live worker", n)
	}
}
