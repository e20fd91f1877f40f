package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Two workers serving pgflow 0.8.1 with runs in flight have it upgraded under them, in-process
// as `db install --migrations` does, to 0.14.1 and then to pgflow's main: each notices,
// prepares for each new pgflow and serves on, without a restart. Every run completes on its one
// attempt, every single step got ABI v1's input ("run" and all), and runs started after an
// upgrade reach a TypeScript handler as the new release's worker gives them. The pause (the
// upgrade's commit to the first task completed after it) is logged.
func TestAPgflowUpgradeUnderAServingWorkerLosesNoRun(t *testing.T) {
	t.Parallel()
	// Unaged: once pgflow 0.14.1 is in, the workers apply pgflow's requeue rule to the tasks of
	// workers that are gone, and the warm flow's tasks belong to one.
	db := pgtest.NewDB(t, pgtest.Unaged())
	if v := db.Protocol(t).Version; v != "0.8" {
		t.Skipf("needs a database at pgflow 0.8.1 (the built-in pgflow) to upgrade; this one has pgflow %s", db.Protocol(t))
	}
	to014, toMain := pgtest.Pgflow014(t), pgtest.PgflowMain(t)
	f := flows(t, `
flows:
  - slug: chain
    max_attempts: 1
    steps:
      - {slug: first, module: "{{oracle}}"}
      - {slug: second, depends_on: [first], module: "{{oracle}}"}
  - slug: shape
    max_attempts: 1
    steps:
      - {slug: echo, module: "{{echo_ts}}"}
`)
	var workers []*runningWorker
	var workerLogs []*syncBuffer
	for range 2 {
		l := &syncBuffer{}
		workerLogs = append(workerLogs, l)
		workers = append(workers, startWorker(t, db.Pool, f, worker.Config{Log: slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))}))
	}
	logs := func() string {
		return "worker 0:\n" + workerLogs[0].String() + "worker 1:\n" + workerLogs[1].String()
	}

	// Runs go on being started through both upgrades, a few at a time.
	ctx, stopRuns := context.WithCancel(context.Background())
	var mu sync.Mutex
	var runs []string
	var starting sync.WaitGroup
	starting.Add(1)
	go func() {
		defer starting.Done()
		for i := 0; i < 2000 && ctx.Err() == nil; i++ {
			// A start may be refused while a migration runs (a deadlock victim): it is not
			// the worker's to answer for, and the next one goes on.
			id, err := store.Start(ctx, db.Pool, "chain", json.RawMessage(`{"iterations": 200000, "n": `+itoa(i)+`}`))
			if err != nil {
				if ctx.Err() == nil {
					t.Logf("starting a run: %v", err)
				}
				continue
			}
			mu.Lock()
			runs = append(runs, id)
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	defer func() { stopRuns(); starting.Wait() }()

	waitCompleted(t, db.Pool, 10, 60*time.Second)
	shapeBefore := shapeRun(t, db.Pool)
	if _, ok := shapeBefore["run"]; !ok {
		t.Errorf("on pgflow 0.8.1 a TypeScript root step got %v, want its input under \"run\"", shapeBefore)
	}
	for _, up := range []struct{ name, dir, protocol string }{
		{"0.14.1", to014, "0.14"},
		{"main", toMain, "main-20261001"},
	} {
		conn := db.Conn(t)
		if _, err := schema.Install(context.Background(), conn, schema.Options{MigrationsDir: up.dir}); err != nil {
			t.Fatalf("upgrading to pgflow %s: %v", up.name, err)
		}
		var committed time.Time
		if err := conn.QueryRow(context.Background(), `select max(applied_at) from pgflow_wasm.schema_migrations`).Scan(&committed); err != nil {
			t.Fatal(err)
		}
		conn.Close(context.Background())
		var first time.Time
		deadline := time.Now().Add(90 * time.Second)
		for first.IsZero() && time.Now().Before(deadline) {
			_ = db.Pool.QueryRow(context.Background(), `select coalesce(min(completed_at), '-infinity') from pgflow.step_tasks
				where completed_at > $1`, committed).Scan(&first)
			if first.Before(committed) {
				first = time.Time{}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if first.IsZero() {
			t.Fatalf("no task completed within 90 s of the upgrade to pgflow %s; the workers' logs:\n%s", up.name, logs())
		}
		// And to the first task both started and completed after it: fetching again.
		var fetched time.Time
		for fetched.IsZero() && time.Now().Before(deadline) {
			_ = db.Pool.QueryRow(context.Background(), `select coalesce(min(completed_at), '-infinity') from pgflow.step_tasks
				where started_at > $1 and completed_at is not null`, committed).Scan(&fetched)
			if fetched.Before(committed) {
				fetched = time.Time{}
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Logf("pause of the upgrade to pgflow %s: %s from its commit to the first task completed after it, %s to the first started and completed after it",
			up.name, first.Sub(committed).Round(time.Millisecond), fetched.Sub(committed).Round(time.Millisecond))
		if testing.Verbose() {
			t.Logf("the workers' logs so far:\n%s", logs())
		}
		// A run started now reaches a handler as the new pgflow gives it.
		got := shapeRun(t, db.Pool)
		if _, ok := got["run"]; ok || got["n"] == nil {
			t.Errorf("after the upgrade to pgflow %s a TypeScript root step got %v, want the flow input itself", up.name, got)
		}
		waitVersion(t, db.Pool, committed, up.protocol)
	}
	stopRuns()
	starting.Wait()

	mu.Lock()
	all := append([]string(nil), runs...)
	mu.Unlock()
	deadline := time.Now().Add(120 * time.Second)
	for {
		var open int
		if err := db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.runs where run_id = any($1::text[]::uuid[])
			and status not in ('completed', 'failed')`, all).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs still open 120 s after the last upgrade; the workers' logs:\n%s", open, len(all), logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, err := db.Pool.Query(context.Background(), `select r.run_id::text, r.status, coalesce(st.error_message, ''),
		coalesce(st.output -> 'input', 'null'), r.input from pgflow.runs r
		left join pgflow.step_tasks st on st.run_id = r.run_id and st.step_slug = 'second'
		where r.run_id = any($1::text[]::uuid[])`, all)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, status, failure string
		var input, runInput json.RawMessage
		if err := rows.Scan(&id, &status, &failure, &input, &runInput); err != nil {
			t.Fatal(err)
		}
		n++
		if status != "completed" {
			t.Errorf("run %s: %s (%s), want completed", id, status, failure)
			continue
		}
		var in map[string]json.RawMessage
		if err := json.Unmarshal(input, &in); err != nil || in["run"] == nil || in["first"] == nil {
			t.Errorf("run %s: step second got %s, want ABI v1's input with \"run\" and \"first\"", id, input)
			continue
		}
		var a, b any
		_ = json.Unmarshal(in["run"], &a)
		_ = json.Unmarshal(runInput, &b)
		if !jsonDeepEqual(a, b) {
			t.Errorf("run %s: step second got run %s, want the run's input %s", id, in["run"], runInput)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs, all completed on their one attempt", n)
	for i, w := range workers {
		select {
		case <-w.Stopped():
			t.Fatalf("worker %d stopped during the upgrades: %v", i, w.Err())
		default:
		}
		// A worker that fetched nothing meanwhile (the other held the queue's fetch lease)
		// notices at its next periodic look.
		deadline := time.Now().Add(30 * time.Second)
		want := `msg="serving again on the changed pgflow" from=`
		final := `to="main (2026-10-01) (protocol main of 2026-10-01 (after 0.17.0))"`
		for !strings.Contains(workerLogs[i].String(), final) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if l := workerLogs[i].String(); !strings.Contains(l, want) || !strings.Contains(l, final) {
			t.Errorf("worker %d's log does not say %q ... %q:\n%s", i, want, final, l)
		}
	}
}

// waitCompleted waits until n runs have completed.
func waitCompleted(t *testing.T, pool *pgxpool.Pool, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var done int
		if err := pool.QueryRow(context.Background(), `select count(*) from pgflow.runs where status = 'completed'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs completed within %s, want %d", done, within, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shapeRun runs flow shape and returns the input its TypeScript handler saw.
func shapeRun(t *testing.T, pool *pgxpool.Pool) map[string]any {
	t.Helper()
	r := waitRun(t, pool, startRun(t, pool, "shape", `{"n": 1}`), 60*time.Second)
	if r.Status != "completed" {
		t.Fatalf("shape: %s (%s)", r.Status, r.Error)
	}
	var out struct {
		Echo struct {
			Input map[string]any `json:"input"`
		} `json:"echo"`
	}
	if err := json.Unmarshal(r.Output, &out); err != nil {
		t.Fatalf("shape's output %s: %v", r.Output, err)
	}
	return out.Echo.Input
}

// waitVersion waits until a task started after since ran with the pgflow version want in its
// context (the oracle returns its context).
func waitVersion(t *testing.T, pool *pgxpool.Pool, since time.Time, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		got = nil
		rows, err := pool.Query(context.Background(), `select distinct coalesce(output -> 'context' ->> 'pgflow_version', '') from pgflow.step_tasks
			where started_at > $1 and status = 'completed' and flow_slug = 'chain'`, since)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		rows.Close()
		for _, v := range got {
			if v == want {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("no task started after the upgrade ran with pgflow_version %q in its context (saw %v)", want, got)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// A pgflow changed under the worker into one it cannot serve (here a task status no release
// has) halts its fetching, and /readyz says why and what it waits for; once pgflow changes
// back the worker serves again, and the run started meanwhile completes.
func TestAWorkerWaitsOutAPgflowItCannotServeAndSaysSo(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: waits
    max_attempts: 1
    steps:
      - {slug: only, module: "{{oracle}}"}
`)
	health := &telemetry.Health{}
	startWorker(t, db.Pool, f, worker.Config{Health: health, PgflowCheckInterval: 100 * time.Millisecond})
	if r := waitRun(t, db.Pool, startRun(t, db.Pool, "waits", `{}`), 60*time.Second); r.Status != "completed" {
		t.Fatalf("before the change: %s (%s)", r.Status, r.Error)
	}
	var def string
	if err := db.Pool.QueryRow(ctx, `select pg_get_constraintdef(oid) from pg_constraint
		where conrelid = 'pgflow.step_tasks'::regclass and conname = 'valid_status'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	newer := strings.Replace(def, "'queued'::text", "'queued'::text, 'paused'::text", 1)
	if newer == def {
		t.Fatalf("cannot add a status to %s", def)
	}
	if _, err := db.Pool.Exec(ctx, `alter table pgflow.step_tasks drop constraint valid_status, add constraint valid_status `+newer); err != nil {
		t.Fatal(err)
	}
	waitReady(t, health, false, "which this worker cannot serve")
	if _, why := health.Ready(); !strings.Contains(why, "tasks have a status paused") || !strings.Contains(why, "waiting for pgflow to change again") {
		t.Errorf("/readyz says %q, want what was found and what the worker waits for", why)
	}
	run := startRun(t, db.Pool, "waits", `{}`)
	time.Sleep(time.Second)
	var status string
	if err := db.Pool.QueryRow(ctx, `select status from pgflow.step_tasks where run_id = $1::uuid`, run).Scan(&status); err != nil || status != "queued" {
		t.Fatalf("a task of a pgflow the worker cannot serve is %s (%v), want it left queued", status, err)
	}
	if _, err := db.Pool.Exec(ctx, `alter table pgflow.step_tasks drop constraint valid_status, add constraint valid_status `+def); err != nil {
		t.Fatal(err)
	}
	waitReady(t, health, true, "ok")
	if r := waitRun(t, db.Pool, run, 60*time.Second); r.Status != "completed" {
		t.Fatalf("the run started while the worker waited: %s (%s)", r.Status, r.Error)
	}
}

// waitReady waits until /readyz answers ready (or not) with a reason containing want.
func waitReady(t *testing.T, h *telemetry.Health, ready bool, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := h.Ready()
		if ok == ready && strings.Contains(why, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still says %v %q after 30 s, want %v and %q", ok, why, ready, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A migration may change no row of schema pgflow's catalogue (data only, or another
// schema), yet be recorded: the fetches then refuse to start tasks on a pgflow the worker
// did not prepare for, and the watch must prepare for it, or no task would start again.
func TestAMigrationThatChangesNoCatalogueRowDoesNotStallTheWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: data_only
    max_attempts: 1
    steps:
      - {slug: only, module: "{{oracle}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{PgflowCheckInterval: time.Hour})
	if r := waitRun(t, db.Pool, startRun(t, db.Pool, "data_only", `{}`), 60*time.Second); r.Status != "completed" {
		t.Fatalf("before the migration: %s (%s)", r.Status, r.Error)
	}
	var newest string
	if err := db.Pool.QueryRow(ctx, schema.NewestMigrationSQL).Scan(&newest); err != nil || newest == "" {
		t.Skipf("needs pgflow installed by db install (its migrations recorded): newest %q, %v", newest, err)
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow_wasm.schema_migrations (name, sha256, pgflow_version)
		select $1, 'test', pgflow_version from pgflow_wasm.schema_migrations where name = $2`, "99991231235959_data_only.sql", newest); err != nil {
		t.Fatal(err)
	}
	if r := waitRun(t, db.Pool, startRun(t, db.Pool, "data_only", `{}`), 60*time.Second); r.Status != "completed" {
		t.Fatalf("after a migration that changed no catalogue row: %s (%s)", r.Status, r.Error)
	}
}
