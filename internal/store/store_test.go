package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

func open(t *testing.T, db *pgtest.DB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const echoFlows = `
flows:
  - slug: one
    steps:
      - {slug: echo, module: {{root}}/modules/testdata/echo.wasm}
  - slug: two
    steps:
      - {slug: echo, module: {{root}}/modules/testdata/echo.wasm}
`

// Runs started in one statement share started_at: the keyset must still visit every run
// once, in a stable order, forwards and backwards.
func TestListRunsPagesThroughEveryRunOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	var want []string
	for i := 0; i < 4; i++ { // distinct started_at
		want = append(want, workertest.StartRun(t, db.Pool, "one", `{}`))
	}
	rows, err := db.Pool.Query(ctx, `select (r).run_id::text from (select pgflow.start_flow('one', '{}') as r from generate_series(1, 5)) s`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() { // five runs with the same started_at (one transaction)
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	other := workertest.StartRun(t, db.Pool, "two", `{}`)
	s := open(t, db)

	var seen []string
	var pages []store.RunPage
	f := store.RunFilter{Flow: "one", Limit: 3}
	for {
		p, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
		for i, r := range p.Runs {
			seen = append(seen, r.ID)
			if r.Flow != "one" {
				t.Errorf("filter flow=one listed a run of %s", r.Flow)
			}
			if i > 0 && r.StartedAt.After(p.Runs[i-1].StartedAt) {
				t.Errorf("runs not newest first: %v after %v", r.StartedAt, p.Runs[i-1].StartedAt)
			}
		}
		if p.Older == nil {
			break
		}
		f.Before, f.After = p.Older, nil
	}
	if len(pages) != 3 {
		t.Errorf("9 runs in pages of 3 gave %d pages", len(pages))
	}
	if pages[0].Newer != nil {
		t.Error("the first page links to a newer page")
	}
	if len(seen) != len(want) {
		t.Fatalf("paged through %d runs, want %d: %v", len(seen), len(want), seen)
	}
	slices.Sort(seen)
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Fatalf("runs seen %v, want %v", seen, want)
	}
	if slices.Contains(seen, other) {
		t.Fatal("a run of flow two was listed under flow one")
	}

	// Back from the last page: the middle page again, then the first.
	back, err := s.List(ctx, store.RunFilter{Flow: "one", Limit: 3, After: pages[2].Newer})
	if err != nil {
		t.Fatal(err)
	}
	if !sameIDs(back.Runs, pages[1].Runs) {
		t.Fatalf("newer than the last page = %v, want the middle page %v", ids(back.Runs), ids(pages[1].Runs))
	}
	first, err := s.List(ctx, store.RunFilter{Flow: "one", Limit: 3, After: back.Newer})
	if err != nil {
		t.Fatal(err)
	}
	if !sameIDs(first.Runs, pages[0].Runs) || first.Newer != nil {
		t.Fatalf("newer than the middle page = %v (newer link %v), want the first page %v", ids(first.Runs), first.Newer, ids(pages[0].Runs))
	}

	// A cursor survives its URL form.
	c, err := store.ParseCursor(pages[0].Older.String())
	if err != nil || !c.StartedAt.Equal(pages[0].Older.StartedAt) || c.RunID != pages[0].Older.RunID {
		t.Fatalf("cursor round trip: %v %v, want %v", c, err, *pages[0].Older)
	}
	for _, bad := range []string{"", "x", "12.not-a-uuid", "abc.00000000-0000-0000-0000-000000000000"} {
		if _, err := store.ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) accepted", bad)
		}
	}
	if _, err := s.List(ctx, store.RunFilter{Status: "weird"}); err == nil {
		t.Error("an unknown status filter was accepted")
	}
}

func ids(rs []pgflowtype.Run) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func sameIDs(a, b []pgflowtype.Run) bool { return slices.Equal(ids(a), ids(b)) }

// The dashboard rebuilds each task's input from the run input and its dependencies'
// outputs (pgflow stores none). echo handlers return exactly what they received, so every
// task's output is the input the worker really gave it: the rebuilt one must equal it, for
// root and dependent map steps and for steps depending on a map and on a single step.
func TestTaskInputsAreWhatTheHandlersReceived(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	file := workertest.FlowsFile(t, `
flows:
  - slug: shapes
    steps:
      - {slug: items, type: map, module: {{root}}/modules/testdata/echo_map.wasm}
      - {slug: whole, depends_on: [items], module: {{root}}/modules/testdata/echo.wasm}
      - {slug: again, type: map, depends_on: [items], module: {{root}}/modules/testdata/echo_map.wasm}
      - {slug: last, depends_on: [whole, again], module: {{root}}/modules/testdata/echo.wasm}
  - slug: from_single
    steps:
      - {slug: list, module: {{root}}/modules/testdata/echo.wasm}
      - {slug: each, type: map, depends_on: [list], module: {{root}}/modules/testdata/echo_map.wasm}
`, nil)
	workertest.StartWorker(t, db.Pool, file, worker.Config{})
	id := workertest.StartRun(t, db.Pool, "shapes", `[1, "two", {"three": [3]}, null, true]`)
	// list returns input.run.value: a map over a single step's array.
	other := workertest.StartRun(t, db.Pool, "from_single", `{"value": [1, "two", {"three": [3]}, null, true]}`)
	for _, r := range []string{id, other} {
		if r := workertest.WaitRun(t, db.Pool, r, 60*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s %s", r.ID, r.Status, r.Error)
		}
	}
	s := open(t, db)
	steps, err := s.Steps(ctx, other)
	if err != nil || len(steps) != 2 {
		t.Fatalf("steps of from_single: %+v %v", steps, err)
	}
	each, err := s.Tasks(ctx, other, steps[1], 0, 10)
	if err != nil || len(each) != 5 {
		t.Fatalf("tasks of each: %+v %v", each, err)
	}
	for _, k := range each {
		if !jsonEqual(k.Input.Text, k.Output.Text) {
			t.Errorf("from_single.each task %d: rebuilt input %s, but the handler received %s", k.Index, k.Input.Text, k.Output.Text)
		}
	}
	steps, err = s.Steps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(steps); got != 4 {
		t.Fatalf("%d steps, want 4", got)
	}
	for _, st := range steps {
		tasks, err := s.Tasks(ctx, id, st, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		wantTasks := 1
		if st.Type == "map" {
			wantTasks = 5
		}
		if len(tasks) != wantTasks || st.Counts["completed"] != wantTasks {
			t.Fatalf("step %s: %d tasks (%v), want %d completed", st.Slug, len(tasks), st.Counts, wantTasks)
		}
		for _, k := range tasks {
			if k.Input.Cut() || k.Output.Cut() {
				t.Fatalf("step %s task %d: small values were cut", st.Slug, k.Index)
			}
			if !jsonEqual(k.Input.Text, k.Output.Text) {
				t.Errorf("step %s task %d: rebuilt input %s, but the handler received %s", st.Slug, k.Index, k.Input.Text, k.Output.Text)
			}
			full, err := s.TaskValue(ctx, id, st.Slug, k.Index, "input")
			if err != nil || !jsonEqual(string(full), k.Output.Text) {
				t.Errorf("step %s task %d: full input %s (%v), want %s", st.Slug, k.Index, full, err, k.Output.Text)
			}
			if k.WorkerID == "" || k.Attempts != 1 || k.StartedAt == nil || k.CompletedAt == nil {
				t.Errorf("step %s task %d: worker %q, attempts %d, started %v, completed %v", st.Slug, k.Index, k.WorkerID, k.Attempts, k.StartedAt, k.CompletedAt)
			}
		}
	}
	// Paging a map step's elements: tasks 2..3.
	page, err := s.Tasks(ctx, id, steps[0], 2, 2)
	if err != nil || len(page) != 2 || page[0].Index != 2 || page[1].Index != 3 {
		t.Fatalf("tasks 2..3 of items: %+v %v", page, err)
	}
	if _, err := s.TaskValue(ctx, id, "items", 99, "output"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a task that does not exist: %v, want ErrNotFound", err)
	}
	if _, err := s.TaskValue(ctx, id, "nope", 0, "output"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a step that does not exist: %v, want ErrNotFound", err)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

// A value larger than a page shows is cut in SQL; the JSON link gives all of it.
func TestLargeValuesAreCutButAvailableWhole(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	big := `{"text": "` + strings.Repeat("é", 3000) + `"}`
	id := workertest.StartRun(t, db.Pool, "one", big)
	s := open(t, db)
	r, err := s.Preview(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Input.Cut() || len(r.Input.Text) > 2*store.CutBytes+4 || r.Input.Bytes != len(big) {
		t.Fatalf("input: cut %v, %d bytes shown of %d (want %d)", r.Input.Cut(), len(r.Input.Text), r.Input.Bytes, len(big))
	}
	if !r.Output.Null || r.Output.Cut() {
		t.Fatalf("output of a running run: %+v, want null", r.Output)
	}
	whole, err := s.RunValue(ctx, id, "input")
	if err != nil || !jsonEqual(string(whole), big) {
		t.Fatalf("whole input: %v, %.60s", err, whole)
	}
	if _, err := s.RunValue(ctx, id, "output"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("output of a running run: %v, want ErrNotFound", err)
	}
	if _, err := s.RunValue(ctx, id, "input; drop table pgflow.runs"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a field that is not input or output: %v, want ErrNotFound", err)
	}
	if _, err := s.Preview(ctx, "not-a-uuid"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a malformed id: %v, want ErrNotFound", err)
	}
}

// The run's fingerprint changes as it progresses and settles when it ends.
func TestRunStateFollowsTheRun(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	file := workertest.FlowsFile(t, echoFlows, nil)
	workertest.Compile(t, db.Pool, file)
	id := workertest.StartRun(t, db.Pool, "one", `{"value": 1}`)
	s := open(t, db)
	before, active, err := s.RunState(ctx, id)
	if err != nil || !active {
		t.Fatalf("a started run: active %v, %v", active, err)
	}
	if again, _, _ := s.RunState(ctx, id); again != before {
		t.Fatal("the fingerprint changed while nothing happened")
	}
	workertest.StartWorker(t, db.Pool, file, worker.Config{})
	workertest.WaitRun(t, db.Pool, id, 60*time.Second)
	after, active, err := s.RunState(ctx, id)
	if err != nil || active || after == before {
		t.Fatalf("a completed run: fingerprint %s (was %s), active %v, %v", after, before, active, err)
	}
}

// Flows, their steps and recent counts; workers, their running tasks and deprecation,
// which makes our worker stop (every flow it served was deprecated).
func TestFlowsWorkersAndDeprecation(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	file := workertest.FlowsFile(t, `
flows:
  - slug: chain
    max_attempts: 2
    timeout: 7
    steps:
      - {slug: a, module: {{root}}/modules/testdata/echo.wasm, timeout: 3}
      - {slug: b, depends_on: [a], module: {{root}}/modules/testdata/fail.wasm, max_attempts: 1}
`, nil)
	w := workertest.StartWorker(t, db.Pool, file, worker.Config{})
	id := workertest.StartRun(t, db.Pool, "chain", `{}`)
	if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "failed" {
		t.Fatalf("run: %s, want failed", r.Status)
	}
	s := open(t, db)
	flows, err := s.Flows(ctx, time.Hour)
	flows = ownFlows(flows)
	if err != nil || len(flows) != 1 {
		t.Fatalf("flows: %+v %v", flows, err)
	}
	f := flows[0]
	if f.Slug != "chain" || f.MaxAttempts != 2 || f.Timeout != 7 || len(f.Steps) != 2 || f.Counts["failed"] != 1 {
		t.Fatalf("flow: %+v", f)
	}
	if a, b := f.Steps[0], f.Steps[1]; a.Timeout == nil || *a.Timeout != 3 || a.MaxAttempts != nil ||
		!slices.Equal(b.DependsOn, []string{"a"}) || b.MaxAttempts == nil || *b.MaxAttempts != 1 {
		t.Fatalf("steps: %+v, %+v", a, b)
	}
	steps, err := s.Steps(ctx, id)
	if err != nil || steps[1].Status != "failed" || !strings.Contains(steps[1].Error, "always fails") {
		t.Fatalf("steps of the failed run: %+v %v", steps, err)
	}
	list, err := s.List(ctx, store.RunFilter{Flow: "chain", Status: "failed"})
	if err != nil || len(list.Runs) != 1 || !strings.Contains(list.Runs[0].Error, "always fails") || list.Runs[0].FailedStep != "b" {
		t.Fatalf("failed runs: %+v %v", list.Runs, err)
	}

	page, err := s.Workers(ctx, "", 10)
	page.Workers = ownWorkers(page.Workers)
	if err != nil || len(page.Workers) != 1 {
		t.Fatalf("workers: %+v %v", page.Workers, err)
	}
	wk := page.Workers[0]
	if wk.ID != w.WorkerIDs()["chain"] || wk.Queue != "chain" || wk.Function != "pgflow-wasm" || !wk.Alive || wk.DeprecatedAt != nil {
		t.Fatalf("worker: %+v (ids %v)", wk, w.WorkerIDs())
	}
	changed, err := s.Deprecate(ctx, wk.ID)
	if err != nil || !changed {
		t.Fatalf("deprecate: %v %v", changed, err)
	}
	if changed, err := s.Deprecate(ctx, wk.ID); err != nil || changed {
		t.Fatalf("deprecating again: changed %v, %v", changed, err)
	}
	if _, err := s.Deprecate(ctx, "00000000-0000-4000-8000-000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deprecating a worker that does not exist: %v", err)
	}
	select {
	case <-w.Stopped():
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop after its only flow was deprecated")
	}
	page, _ = s.Workers(ctx, "", 10)
	if page.Workers[0].DeprecatedAt == nil {
		t.Fatal("deprecated_at is not shown")
	}
}

// Columns that only newer pgflow releases have are read when present. On a pgflow 0.8.1
// database they are added the way pgflow 0.10/0.14 add them; on a 0.14 one (the suites run on
// both) a real condition skips a real step.
func TestNewerPgflowColumnsAreShownWhenPresent(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	proto, err := schema.DetectPgflow(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	if !proto.Conditions {
		workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
		id = workertest.StartRun(t, db.Pool, "one", `{}`)
		if p := open(t, db).Protocol(); p.Conditions || p.StoppedAt {
			t.Fatalf("pgflow 0.8.1 has none of the newer columns, the protocol says %+v", p)
		}
		if _, err := db.Pool.Exec(ctx, `
			alter table pgflow.step_states add column skip_reason text;
			alter table pgflow.workers add column stopped_at timestamptz;
			alter table pgflow.steps add column required_input_pattern jsonb, add column forbidden_input_pattern jsonb,
				add column when_unmet text not null default 'skip', add column when_exhausted text not null default 'fail';
			update pgflow.step_states set skip_reason = 'condition_unmet' where run_id = '`+id+`';
			update pgflow.steps set required_input_pattern = '{"go": true}';`); err != nil {
			t.Fatal(err)
		}
	} else {
		workertest.Compile(t, db.Pool, workertest.FlowsFile(t, `
flows:
  - slug: one
    steps:
      - {slug: echo, module: {{root}}/modules/testdata/echo.wasm, if: {"go": true}}
`, nil))
		id = workertest.StartRun(t, db.Pool, "one", `{"go": false}`) // the condition is unmet: skipped at start
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name, stopped_at)
		values ('00000000-0000-4000-8000-000000000001', 'one', 'edge', now())`); err != nil {
		t.Fatal(err)
	}
	s := open(t, db)
	if p := s.Protocol(); !p.Conditions || !p.StoppedAt {
		t.Fatalf("protocol: %+v", p)
	}
	steps, err := s.Steps(ctx, id)
	if err != nil || steps[0].SkipReason != "condition_unmet" {
		t.Fatalf("skip reason: %+v %v", steps, err)
	}
	flows, err := s.Flows(ctx, time.Hour)
	flows = ownFlows(flows)
	if err != nil || flows[0].Steps[0].RequiredInput != `{"go": true}` || flows[0].Steps[0].WhenUnmet != "skip" {
		t.Fatalf("conditions: %+v %v", flows, err)
	}
	page, err := s.Workers(ctx, "", 10)
	page.Workers = ownWorkers(page.Workers)
	if err != nil || len(page.Workers) != 1 || page.Workers[0].StoppedAt == nil || page.Workers[0].Alive {
		t.Fatalf("stopped worker: %+v %v", page.Workers, err)
	}
}

// ownFlows drops the flow an aged test database was warmed with (PGTEST_PLAN=aged).
func ownFlows(flows []store.Flow) []store.Flow {
	return slices.DeleteFunc(flows, func(f store.Flow) bool { return f.Slug == pgtest.WarmFlow })
}

// ownWorkers drops the worker an aged test database was warmed with.
func ownWorkers(ws []store.Worker) []store.Worker {
	return slices.DeleteFunc(ws, func(w store.Worker) bool { return w.Queue == pgtest.WarmFlow })
}

// Waits hold one connection each and need no other: more waits than the pool has
// connections all finish (each once took a second connection, and with every connection held
// by a wait none could: they deadlocked until their context ended).
func TestMoreWaitsThanPooledConnectionsAllFinish(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	file := workertest.FlowsFile(t, echoFlows, nil)
	workertest.Compile(t, db.Pool, file)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	small, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	s, err := store.Open(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	waiting := workertest.StartRun(t, db.Pool, "two", `{"value": 0}`)
	workertest.StartWorker(t, db.Pool, file, worker.Config{})
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			var r *pgflowtype.Run
			var err error
			if i%2 == 0 {
				r, err = s.StartAndWait(ctx, "one", json.RawMessage(`{"value": 1}`), 5*time.Second)
			} else {
				r, err = s.Wait(ctx, waiting, 5*time.Second)
			}
			if err == nil && r.Status != "completed" {
				err = fmt.Errorf("run %s %s", r.ID, r.Status)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("a wait on a pool of 2 with 8 waiting: %v", err)
		}
	}
}
