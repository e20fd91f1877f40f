package worker_test

import (
	"context"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// With a long recovery interval (many workers sweeping rarely), a dead worker's task still
// comes back a grace after the first sweep that misses its liveness lock, not an interval
// later: the sweep that sees a lock missing looks again once the grace has passed.
func TestADeadWorkersTaskComesBackAGraceAfterTheFirstLookHoweverLongTheInterval(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: orphaned
    base_delay: 1
    steps: [{slug: a, module: "{{echo}}"}]
`)
	workertest.Compile(t, db.Pool, f)
	// A pgflow-wasm worker, heartbeating a moment ago, started the run's task and died: no
	// session holds its liveness lock.
	dead := kit.NewUUID()
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name)
		values ($1::uuid, 'orphaned', $2)`, dead, liveness.FunctionName); err != nil {
		t.Fatal(err)
	}
	run := startRun(t, db.Pool, "orphaned", `{"n": 1}`)
	if _, err := db.Pool.Exec(ctx, `select count(*) from `+db.StartTasks(t, `'orphaned'`,
		`(select array_agg(msg_id) from pgmq.read('orphaned', 60, 10))`, `$1::uuid`), dead); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	startWorker(t, db.Pool, f, fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: pgflowtype.SignalPolling,
		RecoveryInterval: time.Hour, LivenessGrace: 500 * time.Millisecond}))
	// The first sweep (at start) misses the lock, the second (a grace later) requeues the
	// task, which runs again at once; an interval later would be an hour.
	if r := waitRun(t, db.Pool, run, 20*time.Second); r.Status != "completed" {
		t.Fatalf("run %s", r.Status)
	}
	t.Logf("recovered and completed %s after the worker started", time.Since(began).Round(time.Millisecond))
}

// A killed worker's started task goes back to the queue without an attempt failed: with
// max_attempts 1 another worker runs it and the run completes. A killed worker leaves what
// this one leaves: a pgflow-wasm worker row, a task it started, and no session holding its
// liveness lock.
func TestAKilledWorkersTaskWithOneAttemptIsRequeuedAndCompletedByAnother(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: once
    max_attempts: 1
    steps: [{slug: a, module: "{{oracle}}"}]
`)
	workertest.Compile(t, db.Pool, f)
	dead := kit.NewUUID()
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name)
		values ($1::uuid, 'once', $2)`, dead, liveness.FunctionName); err != nil {
		t.Fatal(err)
	}
	run := startRun(t, db.Pool, "once", `{"n": 1}`)
	if _, err := db.Pool.Exec(ctx, `select count(*) from `+db.StartTasks(t, `'once'`,
		`(select array_agg(msg_id) from pgmq.read('once', 3600, 10))`, `$1::uuid`), dead); err != nil {
		t.Fatal(err)
	}
	// The message stays hidden for an hour: only the requeue can show it again.
	w := startWorker(t, db.Pool, f, fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: pgflowtype.SignalPolling,
		LivenessGrace: 500 * time.Millisecond}))
	if r := waitRun(t, db.Pool, run, time.Minute); r.Status != "completed" {
		t.Fatalf("run %s (%s): the dead worker's task cost the run its only attempt", r.Status, r.Error)
	}
	var by, errMsg string
	if err := db.Pool.QueryRow(ctx, `select last_worker_id::text, coalesce(error_message, '') from pgflow.step_tasks where run_id = $1::uuid`, run).
		Scan(&by, &errMsg); err != nil {
		t.Fatal(err)
	}
	if by != w.WorkerIDs()["once"] || errMsg != "" {
		t.Errorf("task completed by %s with error %q: want the live worker %s, no failure recorded", by, errMsg, w.WorkerIDs()["once"])
	}
}
