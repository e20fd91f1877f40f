package retention_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/retention"
	"github.com/pgflow-wasm/pgflow-wasm/internal/runctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/runseed"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

const servedFlows = `
flows:
  - slug: pr_ok
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: b, depends_on: [a], module: "{{echo}}"}
  - slug: pr_fail
    max_attempts: 2
    base_delay: 0
    steps: [{slug: a, module: "{{fail}}"}]
`

// A flow compiled but served by no worker: its runs stay started, their tasks queued.
const unservedFlow = `
flows:
  - slug: pr_idle
    steps: [{slug: a, module: "{{echo}}"}]
`

var modules = map[string]string{"echo": "modules/testdata/echo.wasm", "fail": "modules/testdata/fail.wasm"}

// templates runs two runs that complete and one that fails after a retry (so it has
// attempt history) and returns their ids.
func templates(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	ids := []string{
		workertest.StartRun(t, pool, "pr_ok", `{"n": 1}`),
		workertest.StartRun(t, pool, "pr_ok", `{"n": 2}`),
		workertest.StartRun(t, pool, "pr_fail", `{}`),
	}
	for _, id := range ids {
		workertest.WaitRun(t, pool, id, 2*time.Minute)
	}
	return ids
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// keyed counts every row kept about the runs ids: pgflow's, pgflow-wasm's, and the
// archived messages of the runs' flows.
func keyed(t testing.TB, pool *pgxpool.Pool, ids []string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"pgflow.runs", "pgflow.step_states", "pgflow.step_tasks", "pgflow_wasm.task_attempts",
		"pgflow_wasm.operator_actions", "pgflow_wasm.reruns", "pgflow_wasm.schedule_ticks"} {
		out[table] = count(t, pool, `select count(*) from `+table+` where run_id = any($1::uuid[])`, ids)
	}
	for _, q := range []string{"pr_ok", "pr_fail"} {
		out["pgmq.a_"+q] = count(t, pool, `select count(*) from pgmq.a_`+q+` where message->>'run_id' = any($1)`, ids)
	}
	return out
}

func runIDs(t testing.TB, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Pruning deletes the old finished runs and everything keyed to them, and nothing else: not
// recent finished runs, not old runs that never finished, not the run a worker serves
// meanwhile, and not a flow's latest schedule tick (the scheduler reads it).
func TestPruneDeletesOldFinishedRunsWithEverythingKeyedToThemAndNothingElse(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	pool := db.Pool
	workertest.Compile(t, pool, workertest.FlowsFile(t, unservedFlow, modules))
	workertest.StartWorker(t, pool, workertest.FlowsFile(t, servedFlows, modules), worker.Config{})
	tmpl := templates(t, pool)

	const old, recent = 2000, 100
	if _, err := runseed.Seed(ctx, pool, runseed.Options{Templates: tmpl, Copies: old, Age: 40 * 24 * time.Hour, Chunk: 700}); err != nil {
		t.Fatal(err)
	}
	if _, err := runseed.Seed(ctx, pool, runseed.Options{Templates: tmpl, Copies: recent, Age: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Old runs that never finished: started 60 days ago, their tasks still queued.
	for range 5 {
		workertest.StartRun(t, pool, "pr_idle", `{}`)
	}
	if _, err := pool.Exec(ctx, `update pgflow.runs set started_at = started_at - interval '60 days' where flow_slug = 'pr_idle'`); err != nil {
		t.Fatal(err)
	}
	oldIDs := runIDs(t, pool, `select run_id::text from pgflow.runs where started_at < now() - interval '30 days' and status <> 'started'`)
	keptIDs := runIDs(t, pool, `select run_id::text from pgflow.runs where not (started_at < now() - interval '30 days' and status <> 'started')`)
	if len(oldIDs) != old || len(keptIDs) != recent+len(tmpl)+5 {
		t.Fatalf("seeded %d old and %d other runs, want %d and %d", len(oldIDs), len(keptIDs), old, recent+len(tmpl)+5)
	}

	// pgflow-wasm's own rows: an audit and a rerun link of an old run and of a kept one, and
	// two ticks of a schedule whose runs are old (the later is the flow's latest).
	if err := runctl.EnsureTables(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := schedule.EnsureTable(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`insert into pgflow_wasm.operator_actions (action, run_id, actor, detail) values ('cancel', $1, 'test', 'old'), ('cancel', $2, 'test', 'kept')`,
			[]any{oldIDs[0], keptIDs[0]}},
		{`insert into pgflow_wasm.reruns (run_id, rerun_of, actor) values ($1, $2, 'test'), ($2, $3, 'test')`,
			[]any{oldIDs[0], keptIDs[0], oldIDs[1]}},
		{`insert into pgflow_wasm.schedule_ticks (flow_slug, tick, run_id) values
		  ('pr_ok', now() - interval '41 days', $1), ('pr_ok', now() - interval '40 days', $2)`, []any{oldIDs[0], oldIDs[1]}},
	} {
		if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatal(err)
		}
	}

	before := keyed(t, pool, oldIDs)
	for _, table := range []string{"pgflow.step_states", "pgflow.step_tasks", "pgflow_wasm.task_attempts", "pgmq.a_pr_ok", "pgmq.a_pr_fail"} {
		if before[table] == 0 {
			t.Fatalf("the seed made no %s rows for the old runs: the test would prove nothing", table)
		}
	}
	keptBefore := keyed(t, pool, keptIDs)

	dry, err := retention.Count(ctx, pool, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// A worker serves runs while the prune goes.
	var live []string
	for i := range 20 {
		live = append(live, workertest.StartRun(t, pool, "pr_ok", `{"live": `+strings.Repeat("1", i+1)+`}`))
	}
	pruned, err := retention.Prune(ctx, pool, retention.Options{OlderThan: 30 * 24 * time.Hour, BatchSize: 128})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range live {
		if r := workertest.WaitRun(t, pool, id, 2*time.Minute); r.Status != "completed" {
			t.Fatalf("live run %s: %s (%s)", id, r.Status, r.Error)
		}
	}

	if pruned.Runs != old || pruned.Batches < old/128 {
		t.Fatalf("pruned %d runs in %d batches, want %d in at least %d", pruned.Runs, pruned.Batches, old, old/128)
	}
	want := retention.Counts{Runs: before["pgflow.runs"], StepStates: before["pgflow.step_states"], StepTasks: before["pgflow.step_tasks"],
		ArchivedMessages: before["pgmq.a_pr_ok"] + before["pgmq.a_pr_fail"]}
	for _, got := range []retention.Counts{dry, pruned} {
		if got.Runs != want.Runs || got.StepStates != want.StepStates || got.StepTasks != want.StepTasks || got.ArchivedMessages != want.ArchivedMessages {
			t.Fatalf("counted %+v, want %+v", got, want)
		}
		if got.Own["pgflow_wasm.task_attempts"] != before["pgflow_wasm.task_attempts"] || got.Own["pgflow_wasm.operator_actions"] != 1 ||
			got.Own["pgflow_wasm.reruns"] != 1 || got.Own["pgflow_wasm.schedule_ticks"] != 1 {
			t.Fatalf("own rows counted %v, want %d attempts and 1 audit, rerun and tick row each", got.Own, before["pgflow_wasm.task_attempts"])
		}
	}
	after := keyed(t, pool, oldIDs)
	for table, n := range after {
		if n != 0 && table != "pgflow_wasm.schedule_ticks" {
			t.Errorf("%s: %d rows of pruned runs left", table, n)
		}
	}
	if after["pgflow_wasm.schedule_ticks"] != 0 {
		t.Errorf("a schedule tick still names a pruned run")
	}
	if n := count(t, pool, `select count(*) from pgflow_wasm.schedule_ticks where flow_slug = 'pr_ok' and run_id is null and tick > now() - interval '40 days 1 minute'`); n != 1 {
		t.Errorf("the flow's latest tick: %d rows kept without their run, want 1 (the scheduler reads it)", n)
	}
	if n := count(t, pool, `select count(*) from pgflow_wasm.schedule_ticks`); n != 1 {
		t.Errorf("%d schedule ticks left, want only the latest", n)
	}
	if got := keyed(t, pool, keptIDs); !sameCounts(got, keptBefore) {
		t.Errorf("rows of runs kept changed: before %v, after %v", keptBefore, got)
	}
	if n := count(t, pool, `select count(*) from pgflow.runs where flow_slug = 'pr_idle' and status = 'started'`); n != 5 {
		t.Errorf("%d old unfinished runs left, want all 5", n)
	}
	if n := count(t, pool, `select count(*) from pgflow.step_tasks where run_id = any($1::uuid[])`, live); n != 40 {
		t.Errorf("the live runs have %d tasks, want 40", n)
	}

	again, err := retention.Prune(ctx, pool, retention.Options{OlderThan: 30 * 24 * time.Hour})
	if err != nil || again.Runs != 0 {
		t.Fatalf("a second prune: %d runs, %v; want none left to delete", again.Runs, err)
	}
}

func sameCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// One process prunes a database at a time: a second finds the lock taken and does nothing.
func TestASecondPruneAtOnceDoesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn := db.Conn(t)
	if _, err := conn.Exec(ctx, `select pg_advisory_lock(hashtext('pgflow-wasm:prune'))`); err != nil {
		t.Fatal(err)
	}
	_, ran, err := retention.PruneOnce(ctx, db.Pool, retention.Options{OlderThan: time.Hour})
	if err != nil || ran {
		t.Fatalf("while another holds the lock: ran %v, %v; want not run", ran, err)
	}
	if _, err := conn.Exec(ctx, `select pg_advisory_unlock(hashtext('pgflow-wasm:prune'))`); err != nil {
		t.Fatal(err)
	}
	if _, ran, err := retention.PruneOnce(ctx, db.Pool, retention.Options{OlderThan: time.Hour}); err != nil || !ran {
		t.Fatalf("once the lock is free: ran %v, %v", ran, err)
	}
}

func TestAgesAreDaysOrDurationsAndPositive(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "1d12h": 36 * time.Hour, "45s": 45 * time.Second,
	} {
		if got, err := retention.ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "30", "d", "-1h", "0d", "30days", "1w", "12h30"} {
		if got, err := retention.ParseAge(in); err == nil {
			t.Errorf("ParseAge(%q) = %v, want an error", in, got)
		}
	}
	if _, err := retention.Prune(context.Background(), nil, retention.Options{}); err == nil || !strings.Contains(err.Error(), "more than zero") {
		t.Errorf("a prune without an age: %v", err)
	}
}

// A worker login of `db grant-worker` prunes: it may read the catalog, lock and delete every
// row a prune deletes, and keep a flow's latest schedule tick, on tables the installer made.
func TestAWorkerLoginPrunes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workertest.StartWorker(t, db.Pool, workertest.FlowsFile(t, servedFlows, modules), worker.Config{})
	tmpl := templates(t, db.Pool)
	if _, err := runseed.Seed(ctx, db.Pool, runseed.Options{Templates: tmpl, Copies: 300, Age: 40 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := runctl.EnsureTables(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if err := schedule.EnsureTable(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	old := runIDs(t, db.Pool, `select run_id::text from pgflow.runs where started_at < now() - interval '30 days'`)
	if _, err := db.Pool.Exec(ctx, `insert into pgflow_wasm.schedule_ticks (flow_slug, tick, run_id) values ('pr_ok', now() - interval '40 days', $1)`, old[0]); err != nil {
		t.Fatal(err)
	}
	login := db.Role(t, "prune_worker", "LOGIN")
	conn := db.Conn(t)
	if _, err := schema.GrantWorker(ctx, conn, login, ""); err != nil {
		t.Fatal(err)
	}
	pruned, err := retention.Prune(ctx, db.PoolAs(t, login), retention.Options{OlderThan: 30 * 24 * time.Hour, BatchSize: 100})
	if err != nil {
		t.Fatalf("as the worker login: %v", err)
	}
	if pruned.Runs != int64(len(old)) || pruned.ArchivedMessages == 0 || pruned.Own["pgflow_wasm.task_attempts"] == 0 {
		t.Fatalf("as the worker login: %+v, want %d runs with their messages and attempts", pruned, len(old))
	}
	if left := keyed(t, db.Pool, old); left["pgflow.runs"] != 0 || left["pgflow_wasm.schedule_ticks"] != 0 {
		t.Fatalf("left: %v", left)
	}
}

// The registrations of worker rows silent for the prune's age go, and a process goes with
// its last one; a process that still heartbeats keeps its live rows however old it is.
func TestPruneForgetsWorkerProcessesSilentForItsAge(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	old, fresh := 40*24*time.Hour, time.Minute
	worker := func(age time.Duration) string {
		t.Helper()
		var id string
		if err := db.Pool.QueryRow(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name, started_at, last_heartbeat_at)
			values (gen_random_uuid(), 'pr_ok', 'pgflow-wasm', now() - make_interval(secs => $1), now() - make_interval(secs => $1))
			returning worker_id::text`, age.Seconds()).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	register := func(p procctl.Process, started time.Duration, workers ...string) {
		t.Helper()
		if err := procctl.Register(ctx, db.Pool, p, workers); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db.Pool, `update pgflow_wasm.worker_processes set started_at = now() - make_interval(secs => $2)
			where process_id = $1::uuid`, p.ID, started.Seconds())
	}
	alive := procctl.Process{ID: "11111111-1111-4111-8111-111111111111", Host: "a", PID: 1, Version: "t"}
	gone := procctl.Process{ID: "22222222-2222-4222-8222-222222222222", Host: "b", PID: 2, Version: "t"}
	// alive reloaded long ago (its first worker row is silent) and still heartbeats; gone
	// stopped long ago, one of its rows deleted from pgflow.workers since.
	register(alive, old, worker(old), worker(fresh))
	register(gone, old, worker(old), "33333333-3333-4333-8333-333333333333")

	opts := retention.Options{OlderThan: 30 * 24 * time.Hour}
	want := map[string]int64{"pgflow_wasm.process_workers": 3, "pgflow_wasm.worker_processes": 1}
	counted, err := retention.Count(ctx, db.Pool, opts.OlderThan)
	if err != nil {
		t.Fatal(err)
	}
	pruned, err := retention.Prune(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	for table, n := range want {
		if counted.Own[table] != n || pruned.Own[table] != n {
			t.Errorf("%s: counted %d, pruned %d; want %d", table, counted.Own[table], pruned.Own[table], n)
		}
	}
	if n := count(t, db.Pool, `select count(*) from pgflow_wasm.process_workers where process_id = $1::uuid`, alive.ID); n != 1 {
		t.Errorf("the live process kept %d worker rows, want its 1 live one", n)
	}
	if n := count(t, db.Pool, `select count(*) from pgflow_wasm.worker_processes`); n != 1 {
		t.Errorf("%d processes left, want the live one", n)
	}
	if again, err := retention.Prune(ctx, db.Pool, opts); err != nil || again.Own["pgflow_wasm.process_workers"] != 0 || again.Own["pgflow_wasm.worker_processes"] != 0 {
		t.Errorf("a second prune: %+v, %v; want nothing more", again.Own, err)
	}
}

func mustExec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
