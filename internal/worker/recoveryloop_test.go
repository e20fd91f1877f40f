package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/uuidv4"
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
	dead := uuidv4.New()
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
	startWorker(t, db.Pool, f, fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: worker.SignalPolling,
		RecoveryInterval: time.Hour, LivenessGrace: 500 * time.Millisecond}))
	// The first sweep (at start) misses the lock, the second (a grace later) recovers the
	// task, which runs again after pgflow's retry delay (2 s); an interval later would be
	// an hour.
	if r := waitRun(t, db.Pool, run, 20*time.Second); r.Status != "completed" {
		t.Fatalf("run %s", r.Status)
	}
	t.Logf("recovered and completed %s after the worker started", time.Since(began).Round(time.Millisecond))
}
