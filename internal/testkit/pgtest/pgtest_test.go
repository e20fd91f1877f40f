package pgtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

func TestNewDBIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := pgtest.NewDB(t)
	b := pgtest.NewDB(t)
	if a.Name == b.Name {
		t.Fatalf("two tests share database %s", a.Name)
	}
	if _, err := a.Pool.Exec(ctx, `SELECT pgflow.create_flow('only_in_a', 3, 1, 60)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM pgflow.flows WHERE flow_slug = 'only_in_a'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a flow created in %s is visible in %s", a.Name, b.Name)
	}
	conn := a.Conn(t)
	st, err := schema.Status(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Installed() {
		t.Fatalf("template clone not fully installed: %v", st.Problems())
	}
}

func TestLayerVariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode      schema.LayerMode
		extension bool
	}{{schema.LayerSchema, false}, {schema.LayerExtension, true}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t, pgtest.Layer(tc.mode))
			st, err := schema.Status(context.Background(), db.Conn(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if st.Pgmq.Kind != schema.PgmqLayer || st.Pgmq.Extension != tc.extension {
				t.Fatalf("want the pgflow-wasm layer (extension=%v), got %s", tc.extension, st.Pgmq)
			}
			if len(st.Migrations) != 12 {
				t.Fatalf("want 12 migrations recorded, got %d", len(st.Migrations))
			}
		})
	}
}

func TestEmptyHasNothingInstalled(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Empty())
	st, err := schema.Status(context.Background(), db.Conn(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pgmq.Kind != schema.PgmqMissing || st.Realtime.Kind != schema.RealtimeMissing || len(st.Migrations) != 0 || st.PgflowSchema {
		t.Fatalf("empty database is not empty: %+v", st)
	}
}

func TestDropsDatabaseOnCleanup(t *testing.T) {
	t.Parallel()
	var name string
	admin := pgtest.NewDB(t, pgtest.Empty())
	t.Run("inner", func(t *testing.T) {
		name = pgtest.NewDB(t).Name
	})
	var exists bool
	if err := admin.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

// BenchmarkNewDB measures NewDB once the template exists: CREATE DATABASE ... TEMPLATE
// and the pool (the drop happens at cleanup, after the timing).
func BenchmarkNewDB(b *testing.B) {
	pgtest.NewDB(b) // builds the template (if no earlier run did) outside the timing
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pgtest.NewDB(b)
	}
}

// BenchmarkNewCluster measures a private cluster: initdb, start, and (at cleanup, untimed
// by the loop's end) stop and removal.
func BenchmarkNewCluster(b *testing.B) {
	for i := 0; i < b.N; i++ {
		pgtest.NewCluster(b)
	}
}

// The audit must see what it is there to see: an output stored on another task, a stale
// attempt's output, a wrong input, a double completion and a write into the warm flow.
func TestAuditFindsWhatAWorkerMustNeverDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	worker := kit.NewUUID()
	exec(`select pgflow.create_flow('a', 3, 0, 60)`)
	exec(`select pgflow.add_step('a', 'm', step_type => 'map')`)
	exec(`insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, 'a', 'test')`, worker)
	var run string
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('a', '["x","y","z","w"]')`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	exec(`select count(*) from `+db.StartTasks(t, `'a'`, `(select array_agg(msg_id) from pgmq.read('a', 60, 10))`, `$1::uuid`), worker)
	oracle := func(idx, attempt int, input string) string {
		return fmt.Sprintf(`{"context": {"run_id": %q, "step_slug": "m", "task_index": %d, "attempt": %d, "worker_id": %q}, "input": %s}`,
			run, idx, attempt, worker, input)
	}
	complete := func(idx int, output string) {
		t.Helper()
		exec(`select count(*) from pgflow.complete_task($1::uuid, 'm', $2, $3::jsonb)`, run, idx, output)
	}
	complete(0, oracle(0, 1, `"x"`)) // right
	complete(1, oracle(0, 1, `"x"`)) // task 0's output stored on task 1
	complete(2, oracle(2, 7, `"z"`)) // attempt 7's output, the task is at attempt 1
	complete(3, oracle(3, 1, `"q"`)) // the handler saw another input
	// Complete task 0 a second time.
	exec(`update pgflow.step_tasks set status = 'started', completed_at = null, output = null where run_id = $1::uuid and task_index = 0`, run)
	complete(0, oracle(0, 1, `"x"`))
	r, err := db.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"another task":      r.WrongOutputs,
		"superseded":        r.WrongOutputs,
		`got input "q"`:     r.WrongOutputs,
		"completed 2 times": r.DoubleCompletion,
	}
	for needle, in := range want {
		if !strings.Contains(strings.Join(in, "\n"), needle) {
			t.Errorf("the audit did not report %q: %+v", needle, r)
		}
	}
	if r.OracleTasks != 4 {
		t.Errorf("the oracle checked %d tasks, want 4", r.OracleTasks)
	}
	// These findings are the test's own doing: clear them so the audit at the end passes.
	exec(`truncate pgtest_audit.transitions`)
	exec(`update pgflow.step_tasks set output = '{}' where run_id = $1::uuid`, run)
}

func TestPlanModesAgeTheDatabaseAndChangeItsPlans(t *testing.T) {
	t.Setenv(pgtest.PlanEnv, "aged,noindex")
	ctx := context.Background()
	db := pgtest.NewDB(t)
	states := map[string]int{}
	rows, err := db.Pool.Query(ctx, `select status, count(*) from pgflow.step_tasks where flow_slug = $1 group by status`, pgtest.WarmFlow)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		states[s] = n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for _, s := range []string{"queued", "started", "completed", "failed"} {
		if states[s] == 0 {
			t.Errorf("the warm flow has no %s task: %v", s, states)
		}
	}
	var analyzed bool
	var indexScan, planCache string
	if err := db.Pool.QueryRow(ctx, `select exists (select 1 from pg_stats where schemaname = 'pgflow' and tablename = 'step_tasks'),
		current_setting('enable_indexscan'), current_setting('plan_cache_mode')`).Scan(&analyzed, &indexScan, &planCache); err != nil {
		t.Fatal(err)
	}
	if !analyzed || indexScan != "off" || planCache != "force_generic_plan" {
		t.Errorf("analyzed %v, enable_indexscan %s, plan_cache_mode %s; want statistics, off, force_generic_plan", analyzed, indexScan, planCache)
	}
	// A write into the warm flow is what the audit is there to catch.
	var run, step string
	var idx int
	if err := db.Pool.QueryRow(ctx, `select run_id::text, step_slug, task_index from pgflow.step_tasks
		where flow_slug = $1 and status = 'started' order by run_id, step_slug, task_index limit 1`, pgtest.WarmFlow).Scan(&run, &step, &idx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `select count(*) from pgflow.fail_task($1::uuid, $2, $3, 'x')`, run, step, idx); err != nil {
		t.Fatal(err)
	}
	r, err := db.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.WarmWrites) == 0 {
		t.Errorf("a write into the warm flow was not reported: %+v", r)
	}
	if _, err := db.Pool.Exec(ctx, `truncate pgtest_audit.transitions`); err != nil {
		t.Fatal(err)
	}
}

func TestAnUnknownPlanModeIsAnError(t *testing.T) {
	t.Setenv(pgtest.PlanEnv, "agde")
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { recover() }()
		pgtest.NewDB(ft)
	}()
	if !strings.Contains(ft.msg, `unknown mode "agde"`) {
		t.Errorf("NewDB with a misspelt mode: %q", ft.msg)
	}
}

// fatalRecorder records the message of a Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

func (f *fatalRecorder) Helper() {}
