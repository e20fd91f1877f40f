package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

var testModules = map[string]string{
	"echo":     "modules/testdata/echo.wasm",
	"echo_map": "modules/testdata/echo_map.wasm",
	"oracle":   "modules/testdata/oracle.wasm",
	"flaky":    "modules/testdata/flaky.wasm",
	"fail":     "modules/testdata/fail.wasm",
	"spin":     "modules/testdata/spin.wasm",
	"sum_rs":   "modules/examples/rust/sum.wasm",
	"sum_as":   "modules/examples/assemblyscript/sum.wasm",
	"sum_tg":   "modules/examples/tinygo/sum.wasm",
}

// modulesFor picks the modules a flows file names.
func modulesFor(yamlText string) map[string]string {
	out := map[string]string{}
	for name, path := range testModules {
		if strings.Contains(yamlText, "{{"+name+"}}") {
			out[name] = path
		}
	}
	return out
}

func flows(t testing.TB, yamlText string) *flowfile.File {
	t.Helper()
	return flowsFile(t, yamlText, modulesFor(yamlText))
}

func TestDiamondMixesLanguages(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: diamond
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: b, depends_on: [a], module: "{{sum_rs}}"}
      - {slug: c, depends_on: [a], module: "{{sum_as}}"}
      - {slug: d, depends_on: [b, c], module: "{{sum_tg}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{})
	id := startRun(t, db.Pool, "diamond", `{"value": [1, 2, 3]}`)
	r := waitRun(t, db.Pool, id, 60*time.Second)
	if r.Status != "completed" {
		t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
	}
	// a (C) echoes [1,2,3]; b (Rust) and c (AssemblyScript) each sum it to 6; d (TinyGo) sums
	// both. The run output holds only the leaf step.
	jsonEqual(t, r.Output, `{"d": {"sum": 12}}`)
}

func TestMapStepsOverHundredAndEmptyArrays(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: mapper
    steps:
      - {slug: each, type: map, module: "{{echo_map}}"}
      - {slug: after, type: map, depends_on: [each], module: "{{echo_map}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{Concurrency: 16, BatchSize: 16})
	var elems []string
	for i := range 100 {
		elems = append(elems, fmt.Sprint(i))
	}
	hundred := "[" + strings.Join(elems, ",") + "]"
	full := startRun(t, db.Pool, "mapper", hundred)
	empty := startRun(t, db.Pool, "mapper", `[]`)
	r := waitRun(t, db.Pool, full, 60*time.Second)
	if r.Status != "completed" {
		t.Fatalf("100-element map: %s (%s)", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, `{"after": `+hundred+`}`)
	r = waitRun(t, db.Pool, empty, 30*time.Second)
	if r.Status != "completed" {
		t.Fatalf("empty map: %s (%s)", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, `{"after": []}`)
}

func TestFalsyOutputsComeBackExactly(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: echo
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{})
	for _, v := range []string{`0`, `false`, `""`, `null`, `[]`, `{}`, `-1.5`, `"ünïcødé"`} {
		id := startRun(t, db.Pool, "echo", `{"value": `+v+`}`)
		r := waitRun(t, db.Pool, id, 30*time.Second)
		if r.Status != "completed" {
			t.Fatalf("value %s: %s (%s)", v, r.Status, r.Error)
		}
		jsonEqual(t, []byte(taskOf(t, db.Pool, id).Output), v)
		jsonEqual(t, r.Output, `{"e": `+v+`}`)
	}
}

func TestFailingTwiceThenSucceedingFollowsPgflowRetryDelays(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: flaky
    max_attempts: 3
    base_delay: 1
    steps:
      - {slug: f, module: "{{flaky}}"}
`)
	w := startWorker(t, db.Pool, f, worker.Config{})
	began := time.Now()
	id := startRun(t, db.Pool, "flaky", `{"succeed_on": 3}`)
	r := waitRun(t, db.Pool, id, 60*time.Second)
	took := time.Since(began)
	if r.Status != "completed" {
		t.Fatalf("run: %s (%s)", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, `{"f": {"attempt": 3}}`)
	task := taskOf(t, db.Pool, id)
	attempts, lastErr := task.Attempts, task.Error
	if attempts != 3 {
		t.Errorf("attempts_count = %d, want 3", attempts)
	}
	// pgflow delays retry n by floor(base_delay * 2^n): 2 s after the first failure, 4 s after
	// the second. The run cannot finish sooner than 6 s.
	if took < 6*time.Second {
		t.Errorf("run finished after %s: pgflow's retry delays (2 s + 4 s) were not honoured", took)
	}
	if !strings.Contains(lastErr, "attempt 2 failed") {
		t.Errorf("last error message = %q, want the handler's message for attempt 2", lastErr)
	}
	// pgflow's row forgot attempt 1; pgflow-wasm's attempt history kept both failures.
	tree, err := workertest.Store(t, db.Pool).GetTree(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	earlier := tree.Steps[0].Tasks[0].Earlier
	if len(earlier) != 2 {
		t.Fatalf("earlier attempts = %+v, want attempts 1 and 2", earlier)
	}
	workerID := w.WorkerIDs()["flaky"]
	for i, a := range earlier {
		if a.Attempt != i+1 || !strings.Contains(a.Error, fmt.Sprintf("attempt %d failed", i+1)) || a.WorkerID != workerID ||
			a.StartedAt == nil || a.FailedAt.Before(*a.StartedAt) {
			t.Errorf("earlier attempt %d = %+v, want attempt %d's error, worker %s, start before failure", i, a, i+1, workerID)
		}
	}
	// Retry 1 waits floor(1 * 2^1) = 2 s after the first failure.
	if gap := earlier[1].StartedAt.Sub(earlier[0].FailedAt); gap < 1900*time.Millisecond {
		t.Errorf("attempt 2 started %s after attempt 1 failed, want pgflow's 2 s retry delay", gap)
	}
}

func TestAlwaysFailingHandlerFailsTheRunWithItsMessage(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: doomed
    max_attempts: 2
    base_delay: 0
    steps:
      - {slug: f, module: "{{fail}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{})
	id := startRun(t, db.Pool, "doomed", `{}`)
	r := waitRun(t, db.Pool, id, 30*time.Second)
	if r.Status != "failed" {
		t.Fatalf("run: %s, want failed", r.Status)
	}
	if !strings.Contains(r.Error, "always fails") || !strings.Contains(r.Error, "handler_error") {
		t.Errorf("run error = %q, want the handler's message with its kind", r.Error)
	}
	if attempts := taskOf(t, db.Pool, id).Attempts; attempts != 2 {
		t.Errorf("attempts_count = %d, want max_attempts (2)", attempts)
	}
}

func TestInfiniteLoopTimesOutAndTheWorkerCarriesOn(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: loop
    max_attempts: 1
    steps:
      - {slug: spin, module: "{{spin}}", timeout: 2}
  - slug: echo
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{Concurrency: 2})
	id := startRun(t, db.Pool, "loop", `{}`)
	r := waitRun(t, db.Pool, id, 30*time.Second)
	if r.Status != "failed" || !strings.Contains(r.Error, "Task timed out after 2s") {
		t.Fatalf("run: %s %q, want failed with the timeout message", r.Status, r.Error)
	}
	ran := taskOf(t, db.Pool, id).Ran
	// The task was started, stopped at 2 s and failed in the database within a small margin.
	if ran < 2*time.Second || ran > 3*time.Second {
		t.Errorf("task ran %s between start and failure, want 2 s plus a small margin", ran)
	}
	for i := range 3 {
		id := startRun(t, db.Pool, "echo", fmt.Sprintf(`{"value": %d}`, i))
		if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
			t.Fatalf("after the timeout, run %d: %s (%s)", i, r.Status, r.Error)
		}
	}
}

func TestThreeWorkersCompleteThousandRunsExactlyOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: many
    steps:
      - {slug: e, module: "{{echo}}"}
      - {slug: o, depends_on: [e], module: "{{oracle}}"}
`)
	ctx := context.Background()
	var workers []*runningWorker
	for range 3 { // three workers, each with its own connections, as three processes would be
		pool, err := pgxpool.New(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		workers = append(workers, startWorker(t, pool, f, worker.Config{Concurrency: 8, BatchSize: 8}))
	}
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('many', jsonb_build_object('value', i)) from generate_series(1, 1000) i`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, func() (bool, string) {
		var done int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'many' and status <> 'started'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done == 1000, fmt.Sprintf("%d of 1000 runs ended", done)
	})
	var completed, badOutputs, retried int
	if err := db.Pool.QueryRow(ctx, `
		select count(*) filter (where r.status = 'completed'),
		       count(*) filter (where t.step_slug = 'e' and t.output <> r.input -> 'value'),
		       count(*) filter (where t.attempts_count <> 1)
		from pgflow.runs r join pgflow.step_tasks t on t.run_id = r.run_id where r.flow_slug = 'many'`).
		Scan(&completed, &badOutputs, &retried); err != nil {
		t.Fatal(err)
	}
	if completed != 2000 || badOutputs != 0 || retried != 0 {
		t.Fatalf("completed %d of 2000 tasks, %d wrong outputs, %d tasks run more than once", completed, badOutputs, retried)
	}
	if r, err := db.Audit(ctx); err != nil || r.OracleTasks != 1000 || len(r.Problems()) > 0 {
		t.Fatalf("audit: %d oracle tasks checked (want 1000), problems %v, %v", r.OracleTasks, r.Problems(), err)
	}
	// The counters move just after each outcome's commit: wait for the last of them.
	waitFor(t, 10*time.Second, func() (bool, string) {
		var started, written float64
		for _, w := range workers {
			started += testutil.ToFloat64(w.Metrics.TasksStarted.WithLabelValues("many", "e"))
			written += testutil.ToFloat64(w.Metrics.TasksCompleted.WithLabelValues("many", "e"))
		}
		return started == 1000 && written == 1000,
			fmt.Sprintf("workers started %v and completed %v handler calls, want exactly 1000 each", started, written)
	})
}

func TestRecoveryRequeuesTasksOfADeadWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: orphan
    base_delay: 0
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	ctx := context.Background()
	// A worker that started a task and died: registered, its heartbeat an hour old.
	if _, err := compile.Compile(ctx, db.Pool, f, compile.Options{}); err != nil {
		t.Fatal(err)
	}
	dead := kit.NewUUID()
	id := startRun(t, db.Pool, "orphan", `{"value": "survivor"}`)
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name, last_heartbeat_at)
		values ($1::uuid, 'orphan', 'dead-worker', now() - interval '1 hour')`, dead); err != nil {
		t.Fatal(err)
	}
	var started int
	if err := db.Pool.QueryRow(ctx, `select count(*) from `+db.StartTasks(t, `'orphan'`,
		`(select array_agg(msg_id) from pgmq.read('orphan', 3600, 10))`, `$1::uuid`), dead).Scan(&started); err != nil || started != 1 {
		t.Fatalf("starting the orphan task: %v (%d started)", err, started)
	}
	startWorker(t, db.Pool, f, worker.Config{WorkerStaleAfter: 5 * time.Second})
	r := waitRun(t, db.Pool, id, 30*time.Second)
	if r.Status != "completed" {
		t.Fatalf("run: %s (%s)", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, `{"e": "survivor"}`)
	// Requeued as pgflow's requeue_stalled_tasks requeues: no error on pgflow's row, the next
	// start counted; the attempt history keeps why attempt 1 ended.
	task := taskOf(t, db.Pool, id)
	var why string
	if err := db.Pool.QueryRow(ctx, `select error_message from pgflow_wasm.task_attempts where run_id = $1::uuid and attempt = 1`, id).
		Scan(&why); err != nil {
		t.Fatalf("the attempt history of the requeued attempt: %v", err)
	}
	if task.Attempts != 2 || task.Error != "" || !strings.Contains(why, "stopped heartbeating") {
		t.Errorf("attempts %d, error %q, attempt 1 ended with %q: want attempt 2, no error, a reason naming the dead worker",
			task.Attempts, task.Error, why)
	}
}

func TestSurvivesAPostgresRestart(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	db := cluster.NewDB(t)
	f := flows(t, `
flows:
  - slug: steady
    steps:
      - {slug: w, module: "{{oracle}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{Concurrency: 4})
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('steady', '{"iterations": 12000000}') from generate_series(1, 200)`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() (bool, string) {
		var done int
		_ = db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'steady' and status = 'completed'`).Scan(&done)
		return done >= 20, fmt.Sprintf("%d runs completed before the restart", done)
	})
	restartCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cluster.Restart(restartCtx); err != nil {
		t.Fatalf("restarting PostgreSQL: %v", err)
	}
	waitFor(t, 120*time.Second, func() (bool, string) {
		var done int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'steady' and status = 'completed'`).Scan(&done); err != nil {
			return false, err.Error()
		}
		return done == 200, fmt.Sprintf("%d of 200 runs completed after the restart", done)
	})
}

func TestDeprecatedFlowStopsTakingWork(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: old
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	w := startWorker(t, db.Pool, f, worker.Config{})
	ctx := context.Background()
	id := startRun(t, db.Pool, "old", `{"value": 1}`)
	waitRun(t, db.Pool, id, 30*time.Second)
	if _, err := db.Pool.Exec(ctx, `update pgflow.workers set deprecated_at = now() where worker_id = $1::uuid`, w.WorkerIDs()["old"]); err != nil {
		t.Fatal(err)
	}
	// Every flow of the worker is deprecated: it drains and Run returns by itself.
	select {
	case <-w.Stopped():
		if w.Err() != nil {
			t.Fatalf("Run: %v", w.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker still running 30 s after its only flow was deprecated")
	}
	late := startRun(t, db.Pool, "old", `{"value": 2}`)
	time.Sleep(time.Second)
	status := taskOf(t, db.Pool, late).Status
	if status != "queued" {
		t.Errorf("task of a run started after deprecation is %s, want queued (no worker may take it)", status)
	}
}

// waitFor polls cond until it holds; tests use it to watch the database, never to time code.
func waitFor(t testing.TB, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("condition not reached within %s: %s", within, last)
}
