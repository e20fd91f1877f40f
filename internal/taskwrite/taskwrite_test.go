package taskwrite_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// A write's transaction reuses generic plans: pgflow's statements and the layer's, some of
// which take arrays, are not planned again at every call (package plans).
func TestAWriteReusesGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.NewDB(t).Conn(t)
	if _, err := conn.Exec(ctx, `set plan_cache_mode = auto`); err != nil {
		t.Fatal(err)
	}
	// A task that does not exist: the guard picks nothing and the write is reported stale.
	results := make([]taskwrite.Result, 1)
	b := &pgx.Batch{}
	taskwrite.Queue(b, taskwrite.Complete, []taskwrite.Call{{RunID: kit.NewUUID(), StepSlug: "s", Attempt: 1, Arg: `{}`}}, results, taskwrite.Options{})
	var during string
	b.Queue(`select current_setting('plan_cache_mode')`).QueryRow(func(r pgx.Row) error { return r.Scan(&during) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if during != "force_generic_plan" {
		t.Errorf("plan_cache_mode during a write = %q, want force_generic_plan", during)
	}
	if !results[0].Stale {
		t.Errorf("the write of a task that does not exist = %+v, want stale", results[0])
	}
}

// A requeue puts the task back as pgflow's requeue_stalled_tasks does: queued, its worker and
// start cleared, its message visible at once, no error. The next start counts in
// attempts_count, unless the requeue gave the start back (an attempt no one can still write
// an outcome for), and a requeue of an attempt that moved on changes nothing.
func TestARequeuePutsTheTaskBackAndMayGiveTheStartBack(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	p := db.Protocol(t)
	opts := taskwrite.RequeueOptions{Counted: p.Requeue, QueueNames: p.QueueNames}
	for _, sql := range []string{`select pgflow.create_flow('rq', 1, 0, 60)`, `select pgflow.add_step('rq', 's')`,
		`insert into pgflow.workers (worker_id, queue_name, function_name) values ('00000000-0000-4000-8000-000000000001', 'rq', 'test')`} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var run string
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('rq', '{}')`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	start := func() {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, `select count(*) from `+db.StartTasks(t, `'rq'`, `(select array_agg(msg_id) from pgmq.read('rq', 3600, 10))`,
			`'00000000-0000-4000-8000-000000000001'::uuid`)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("starting the task: %v (%d started)", err, n)
		}
	}
	state := func() (status string, attempts int, worker, errMsg string) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `select status, attempts_count, coalesce(last_worker_id::text, ''), coalesce(error_message, '')
			from pgflow.step_tasks where run_id = $1::uuid`, run).Scan(&status, &attempts, &worker, &errMsg); err != nil {
			t.Fatal(err)
		}
		return
	}
	call := taskwrite.Call{RunID: run, StepSlug: "s", Attempt: 1, Arg: "test: a fault"}

	start()
	opts.GiveBack = true
	if res, err := taskwrite.RequeueOne(ctx, db.Pool, call, opts); err != nil || !res.Requeued || res.Status != "queued" {
		t.Fatalf("requeue with the start given back = %+v, %v", res, err)
	}
	if status, attempts, worker, errMsg := state(); status != "queued" || attempts != 0 || worker != "" || errMsg != "" {
		t.Fatalf("after the give-back: %s, attempts %d, worker %q, error %q; want queued, 0, none, none", status, attempts, worker, errMsg)
	}
	start() // visible at once, and attempt 1 again
	if _, attempts, _, _ := state(); attempts != 1 {
		t.Fatalf("the start after a give-back is attempt %d, want 1", attempts)
	}

	opts.GiveBack = false
	if res, err := taskwrite.RequeueOne(ctx, db.Pool, call, opts); err != nil || !res.Requeued {
		t.Fatalf("requeue = %+v, %v", res, err)
	}
	if res, err := taskwrite.RequeueOne(ctx, db.Pool, call, opts); err != nil || !res.Stale {
		t.Fatalf("a second requeue of the same attempt = %+v, %v; want stale", res, err)
	}
	start()
	if status, attempts, _, _ := state(); status != "started" || attempts != 2 {
		t.Fatalf("the start after a requeue: %s at attempt %d, want started at 2 (pgflow counts starts)", status, attempts)
	}
}

// An attempt's number can come round again: a start given back is started anew at the same
// number, perhaps by another worker. The outcome of the first start is then stale; the new
// start's applies.
func TestAGivenBackStartsLateOutcomeIsStale(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	p := db.Protocol(t)
	const first, second = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	for _, sql := range []string{`select pgflow.create_flow('gb', 1, 0, 60)`, `select pgflow.add_step('gb', 's')`,
		`insert into pgflow.workers (worker_id, queue_name, function_name) values ('` + first + `', 'gb', 'test'), ('` + second + `', 'gb', 'test')`} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var run string
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('gb', '{}')`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	start := func(worker string) {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, `select count(*) from `+db.StartTasks(t, `'gb'`, `(select array_agg(msg_id) from pgmq.read('gb', 3600, 10))`,
			`'`+worker+`'::uuid`)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("starting the task: %v (%d started)", err, n)
		}
	}
	write := func(worker, output string) taskwrite.Result {
		t.Helper()
		results := make([]taskwrite.Result, 1)
		b := &pgx.Batch{}
		taskwrite.Queue(b, taskwrite.Complete, []taskwrite.Call{{RunID: run, StepSlug: "s", Attempt: 1, Arg: output, WorkerID: worker}}, results, taskwrite.Options{})
		if err := db.Pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		return results[0]
	}
	start(first)
	if res, err := taskwrite.RequeueOne(ctx, db.Pool, taskwrite.Call{RunID: run, StepSlug: "s", Attempt: 1, Arg: "test: reply lost"},
		taskwrite.RequeueOptions{Counted: p.Requeue, QueueNames: p.QueueNames, GiveBack: true}); err != nil || !res.Requeued {
		t.Fatalf("give-back = %+v, %v", res, err)
	}
	start(second) // attempt 1 again, by another worker
	if res := write(first, `{"by": "first"}`); !res.Stale {
		t.Fatalf("the given-back start's late outcome = %+v, want stale", res)
	}
	if res := write(second, `{"by": "second"}`); res.Stale || res.Status != "completed" {
		t.Fatalf("the new start's outcome = %+v, want completed", res)
	}
	var output string
	if err := db.Pool.QueryRow(ctx, `select output::text from pgflow.step_tasks where run_id = $1::uuid`, run).Scan(&output); err != nil {
		t.Fatal(err)
	}
	if output != `{"by": "second"}` {
		t.Errorf("the task's output = %s, want the second start's", output)
	}
}
