package worker_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// splitFlows is a flow whose first and last steps another worker serves.
const splitFlows = `
flows:
  - slug: split
    steps:
      - {slug: a, external: true}
      - {slug: b, depends_on: [a], module: "{{echo}}"}
      - {slug: c, depends_on: [b], external: true}
`

// sqlWorker is a worker of another kind, written in SQL the way any pgflow worker speaks
// the protocol: it serves the steps it is given, reading only their per-step queues.
type sqlWorker struct {
	id    string
	pool  *pgxpool.Pool
	flow  string
	steps map[string]func(input string) string // step -> output for its input
}

// run serves until ctx ends.
func (s *sqlWorker) run(ctx context.Context, t *testing.T) error {
	if _, err := s.pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, $2, 'sql-test-worker')`,
		s.id, s.flow); err != nil {
		return err
	}
	for ctx.Err() == nil {
		idle := true
		for step, handler := range s.steps {
			var queue string
			if err := s.pool.QueryRow(ctx, `select queue_name from pgflow.steps where flow_slug = $1 and step_slug = $2`, s.flow, step).
				Scan(&queue); err != nil {
				return err
			}
			// Read, then claim in a later transaction: start_tasks stamps started_at with its
			// transaction's start, which must not precede the task's queued_at.
			var ids []int64
			if err := s.pool.QueryRow(ctx, `select coalesce(array_agg(msg_id), '{}') from pgmq.read($1, 30, 20)`, queue).Scan(&ids); err != nil {
				return err
			}
			if len(ids) == 0 {
				continue
			}
			rows, err := s.pool.Query(ctx, `
				select t.run_id::text, t.task_index, t.input::text from pgflow.start_tasks($1, $2::bigint[], $3::uuid, $4, $5) t`,
				s.flow, ids, s.id, queue, step)
			if err != nil {
				return err
			}
			type task struct {
				run   string
				index int
				input string
			}
			tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (task, error) {
				var tk task
				err := row.Scan(&tk.run, &tk.index, &tk.input)
				return tk, err
			})
			if err != nil {
				return err
			}
			for _, tk := range tasks {
				idle = false
				if _, err := s.pool.Exec(ctx, `select pgflow.complete_task($1::uuid, $2, $3, $4::jsonb)`,
					tk.run, step, tk.index, handler(tk.input)); err != nil {
					return err
				}
			}
		}
		if idle {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// A flow split between two kinds of worker on pgflow 0.17+: steps a and c are served by a
// worker that speaks SQL, b by pgflow-wasm; each reads only its own steps' queues and every
// task is served by the right worker. The flow is compiled first by "the other side" with
// per-step queues, as pgflow's TypeScript worker compiles it, and pgflow-wasm takes its step
// over with no other change.
func TestASplitFlowIsServedByTwoKindsOfWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	if !db.Protocol(t).QueueNames {
		t.Skip("split flows need per-step queues: pgflow 0.17+ (`make test-pgflow-main` runs this)")
	}
	ctx := context.Background()
	// The other side compiles the flow as pgflow's own workers do on 0.17: a queue per step.
	var compiled string
	if err := db.Pool.QueryRow(ctx, `select pgflow.ensure_flow_compiled('split', $1::jsonb, 'step')::text`, `{
		"options": {"maxAttempts": 3, "baseDelay": 1, "timeout": 60},
		"steps": [
		  {"slug": "a", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
		   "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}},
		  {"slug": "b", "stepType": "single", "dependencies": ["a"], "whenUnmet": "skip", "whenExhausted": "fail",
		   "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}},
		  {"slug": "c", "stepType": "single", "dependencies": ["b"], "whenUnmet": "skip", "whenExhausted": "fail",
		   "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}]}`).Scan(&compiled); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(compiled, `"compiled"`) {
		t.Fatalf("ensure_flow_compiled: %s", compiled)
	}
	f := flows(t, splitFlows)
	w := startWorker(t, db.Pool, f, worker.Config{})
	other := &sqlWorker{id: kit.NewUUID(), pool: db.Pool, flow: "split", steps: map[string]func(string) string{
		"a": func(string) string { return `{"from": "a"}` },
		"c": func(input string) string { return `{"from": "c", "got": ` + input + `}` },
	}}
	otherCtx, stopOther := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var otherErr error
	go func() { defer wg.Done(); otherErr = other.run(otherCtx, t) }()
	defer func() {
		stopOther()
		wg.Wait()
		if otherErr != nil && !errors.Is(otherErr, context.Canceled) {
			t.Errorf("the SQL worker: %v", otherErr)
		}
	}()

	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = startRun(t, db.Pool, "split", fmt.Sprintf(`{"i": %d}`, i))
	}
	for _, id := range ids {
		if r := waitRun(t, db.Pool, id, time.Minute); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
	}
	ours := w.WorkerIDs()["split"]
	rows, err := db.Pool.Query(ctx, `select step_slug, last_worker_id::text, count(*) from pgflow.step_tasks
		where flow_slug = 'split' group by 1, 2 order by 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	served := map[string]string{"a": other.id, "b": ours, "c": other.id}
	for rows.Next() {
		var step, by string
		var count int
		if err := rows.Scan(&step, &by, &count); err != nil {
			t.Fatal(err)
		}
		if by != served[step] || count != n {
			t.Errorf("step %s: %d tasks served by %s, want %d by %s", step, count, by, n, served[step])
		}
	}
	// b's handler got a's output, as the other side wrote it.
	var out string
	if err := db.Pool.QueryRow(ctx, `select output::text from pgflow.step_tasks where run_id = $1::uuid and step_slug = 'c'`, ids[0]).Scan(&out); err != nil ||
		!strings.Contains(out, `"a": {"from": "a"}`) {
		t.Errorf("c's output %s (%v): want b's echo of a's output", out, err)
	}
}

// A flows file that splits a flow is refused where pgflow cannot route steps apart (before
// 0.17 every task of a flow shares one queue), naming the version that can.
func TestASplitFlowIsRefusedBefore017(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	if db.Protocol(t).QueueNames {
		t.Skip("this database has pgflow 0.17+, which routes steps apart")
	}
	f := flows(t, splitFlows)
	_, err := compile.Compile(context.Background(), db.Pool, f, compile.Options{})
	if err == nil || !strings.Contains(err.Error(), "needs a queue per step: pgflow 0.17 or newer") {
		t.Fatalf("compile: %v, want a refusal naming pgflow 0.17", err)
	}
}

// A task of an external step whose handler stalled (the other side's worker lives and
// heartbeats, but never finishes it) comes back where no pg_cron runs pgflow's own
// requeue_stalled_tasks (plain PostgreSQL, pgflow-wasm's inert stand-in): the sweep applies
// upstream's rule (started longer ago than its timeout plus 30 s) and puts it back in the
// queue, where the other side takes it again; the run completes.
func TestAStalledTaskOfAnExternalStepIsRequeuedWhereNoPgCronRunsPgflowsJob(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	if !db.Protocol(t).QueueNames {
		t.Skip("split flows need per-step queues: pgflow 0.17+ (`make test-pgflow-main` runs this)")
	}
	ctx := context.Background()
	f := flows(t, splitFlows)
	if _, err := compile.Compile(ctx, db.Pool, f, compile.Options{}); err != nil {
		t.Fatal(err)
	}
	var cronRuns bool
	if err := db.Pool.QueryRow(ctx, `select exists (select 1 from pg_extension where extname = 'pg_cron')`).Scan(&cronRuns); err != nil || cronRuns {
		t.Fatalf("this test database has a real pg_cron (%v): the test needs the stand-in", err)
	}
	run := startRun(t, db.Pool, "split", `{"i": 1}`)
	// The other side's worker takes a's task and its handler hangs: the worker row stays
	// fresh (a live worker), the task stays started, its message hidden for an hour.
	stalled := kit.NewUUID()
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, 'split', 'sql-test-worker')`,
		stalled); err != nil {
		t.Fatal(err)
	}
	var queue string
	if err := db.Pool.QueryRow(ctx, `select queue_name from pgflow.steps where flow_slug = 'split' and step_slug = 'a'`).Scan(&queue); err != nil {
		t.Fatal(err)
	}
	var started int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.start_tasks('split', (select array_agg(msg_id) from pgmq.read($1, 3600, 10)),
		$2::uuid, $1, 'a')`, queue, stalled).Scan(&started); err != nil || started != 1 {
		t.Fatalf("starting a's task as the other side: %v (%d started)", err, started)
	}
	// Started an hour ago: far past its timeout plus 30 s.
	if _, err := db.Pool.Exec(ctx, `update pgflow.step_tasks set queued_at = queued_at - interval '1 hour', started_at = started_at - interval '1 hour'
		where run_id = $1::uuid and step_slug = 'a'`, run); err != nil {
		t.Fatal(err)
	}
	startWorker(t, db.Pool, f, fastConfig(worker.Config{Engine: engine(t, "wazero"), Signal: pgflowtype.SignalPolling}))
	other := &sqlWorker{id: kit.NewUUID(), pool: db.Pool, flow: "split", steps: map[string]func(string) string{
		"a": func(string) string { return `{"from": "a"}` },
		"c": func(string) string { return `{"from": "c"}` },
	}}
	otherCtx, stopOther := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var otherErr error
	go func() { defer wg.Done(); otherErr = other.run(otherCtx, t) }()
	defer func() {
		stopOther()
		wg.Wait()
		if otherErr != nil && !errors.Is(otherErr, context.Canceled) {
			t.Errorf("the SQL worker: %v", otherErr)
		}
	}()
	if r := waitRun(t, db.Pool, run, time.Minute); r.Status != "completed" {
		t.Fatalf("run %s (%s): the external step's stalled task never came back", r.Status, r.Error)
	}
	var by string
	var attempts, requeued int
	if err := db.Pool.QueryRow(ctx, `select last_worker_id::text, attempts_count, requeued_count from pgflow.step_tasks
		where run_id = $1::uuid and step_slug = 'a'`, run).Scan(&by, &attempts, &requeued); err != nil {
		t.Fatal(err)
	}
	if by != other.id || attempts != 2 || requeued != 1 {
		t.Errorf("a's task: by %s after %d starts, requeued %d times; want the other side's live worker %s, 2 starts, 1 requeue",
			by, attempts, requeued, other.id)
	}
}
