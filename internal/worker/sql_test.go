package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func init() {
	testModules["sql_call"] = "modules/testdata/sql_call.wasm"
	testModules["ledger_rs"] = "modules/examples/rust/ledger.wasm"
	testModules["ledger_tg"] = "modules/examples/tinygo/ledger.wasm"
	testModules["ledger_ts"] = "modules/examples/typescript/ledger.ts"
	testModules["caught_ts"] = "modules/testdata/ts/caught.ts"
}

func ledgerRows(t *testing.T, db *pgtest.DB, where string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "select count(*) from app.ledger "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The ledger example in Rust and TinyGo, on both engines: each step inserts its row as the
// step's role and reads back the run's total; two steps of one run add up.
func TestLedgerWritesThroughItsRole(t *testing.T) {
	t.Parallel()
	for _, engine := range sandbox.Engines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			role := db.Ledger(t)
			f := flows(t, fmt.Sprintf(`
flows:
  - slug: ledger
    sql: {role: %s}
    steps:
      - {slug: first, module: "{{ledger_rs}}"}
      - {slug: second, depends_on: [first], module: "{{ledger_tg}}"}
`, role))
			w := startWorker(t, db.Pool, f, worker.Config{Engine: engineFor(t, engine)})
			id := startRun(t, db.Pool, "ledger", `{"amount": 21}`)
			r := waitRun(t, db.Pool, id, 60*time.Second)
			if r.Status != "completed" {
				t.Fatalf("run %s: %s", r.Status, r.Error)
			}
			jsonEqual(t, r.Output, `{"second": {"inserted": 1, "total": 42}}`)
			if n := ledgerRows(t, db, fmt.Sprintf("where run_id = '%s'", id)); n != 2 {
				t.Fatalf("%d rows, want 2", n)
			}
			// The counters move just after the commit the run's status shows.
			m := w.Metrics
			waitFor(t, 10*time.Second, func() (bool, string) {
				st, rows := testutil.ToFloat64(m.SQLStatements.WithLabelValues("ledger", "first")), testutil.ToFloat64(m.SQLRows.WithLabelValues("ledger", "second"))
				tx := testutil.ToFloat64(m.SQLTransactions.WithLabelValues("ledger", "second", "committed"))
				return st == 2 && rows == 2 && tx == 1, fmt.Sprintf("statements of first %v (want 2), rows of second %v (want 2: one inserted, "+
					"one summed), committed transactions of second %v (want 1)", st, rows, tx)
			})
		})
	}
}

// ctx.sql in a TypeScript handler: the ledger in TypeScript beside the Rust one, writing
// through the same role, each value a parameter.
func TestTypeScriptLedgerWritesThroughCtxSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: ledger_ts
    sql: {role: %s}
    steps:
      - {slug: first, module: "{{ledger_rs}}"}
      - {slug: second, depends_on: [first], module: "{{ledger_ts}}"}
`, role))
	startWorker(t, db.Pool, f, worker.Config{})
	id := startRun(t, db.Pool, "ledger_ts", `{"amount": 21}`)
	r := waitRun(t, db.Pool, id, 60*time.Second)
	if r.Status != "completed" {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, `{"second": {"inserted": 1, "total": 42}}`)
	if n := ledgerRows(t, db, fmt.Sprintf("where run_id = '%s'", id)); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

// Every way out of the step's role fails its own task with its own message, on both
// engines, while the worker goes on (a good run beside them completes); nothing any of
// them wrote is kept, although each first inserted a row.
func TestSQLWallFailsOnlyItsTask(t *testing.T) {
	t.Parallel()
	type wallCase struct{ slug, sql, want string }
	cases := []wallCase{
		{"pgflow_runs", "select * from pgflow.runs", "sql: permission denied for schema pgflow (SQLSTATE 42501)"},
		{"other_schema", "select * from secret.keys", "sql: permission denied for schema secret (SQLSTATE 42501)"},
		{"read_file", "select pg_read_file('/etc/passwd')", "sql: calling pg_read_file is not allowed"},
		{"set_role", "SET ROLE postgres", "sql: SET statements are not allowed"},
		{"reset_role", "RESET ROLE", "sql: RESET statements are not allowed"},
		{"two_statements", "select 1; select 2", "sql: one statement per call"},
		{"copy_program", "COPY (select 1) TO PROGRAM 'id'", "sql: COPY statements are not allowed"},
		{"sleep", "select pg_sleep(600)", "sql: canceling statement due to statement timeout (SQLSTATE 57014)"},
		{"ten_million_rows", "select generate_series(1, 10000000)", "sql: a statement of step \"call\" of flow \"ten_million_rows\""},
		{"role_change", "select app.become('none')", "changed who it runs as (current_user \"ledger_writer_"},
	}
	for _, engine := range sandbox.Engines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			role := db.Ledger(t)
			var yaml strings.Builder
			yaml.WriteString("flows:\n")
			step := func(slug, sql string) {
				fmt.Fprintf(&yaml, "  - slug: %s\n    max_attempts: 1\n    timeout: 20\n    steps:\n      - slug: call\n        module: \"{{sql_call}}\"\n%s", slug, sql)
			}
			for _, c := range append(cases, wallCase{slug: "good"}) {
				step(c.slug, fmt.Sprintf("        sql: {role: %s, statement_timeout: 1s, max_rows: 1000}\n", role))
			}
			step("no_sql", "")
			step("default_timeout", fmt.Sprintf("        sql: {role: %s}\n", role))
			f := flows(t, strings.Replace(yaml.String(), "- slug: default_timeout\n    max_attempts: 1\n    timeout: 20", "- slug: default_timeout\n    max_attempts: 1\n    timeout: 2", 1))
			w := startWorker(t, db.Pool, f, worker.Config{Engine: engineFor(t, engine)})
			input := func(sql string) string {
				stmts := []map[string]any{{"sql": "insert into app.ledger values (gen_random_uuid(), 0, 1)"}}
				if sql != "" {
					stmts = append(stmts, map[string]any{"sql": sql})
				}
				b, _ := json.Marshal(map[string]any{"statements": stmts})
				return string(b)
			}
			ids := map[string]string{}
			for _, c := range cases {
				ids[c.slug] = startRun(t, db.Pool, c.slug, input(c.sql))
			}
			ids["no_sql"] = startRun(t, db.Pool, "no_sql", input(""))
			ids["default_timeout"] = startRun(t, db.Pool, "default_timeout", input("select pg_sleep(600)"))
			good := startRun(t, db.Pool, "good", input("select count(*) as n from app.ledger"))
			if r := waitRun(t, db.Pool, good, 60*time.Second); r.Status != "completed" {
				t.Fatalf("the good run: %s (%s)", r.Status, r.Error)
			} else {
				jsonEqual(t, r.Output, `{"call": {"results": [{"columns": [], "rows": [], "row_count": 1, "command": "INSERT 0 1"},
					{"columns": ["n"], "rows": [[1]], "row_count": 1, "command": "SELECT 1"}]}}`)
			}
			want := map[string]string{"no_sql": "sql: step \"call\" of flow \"no_sql\" (" + f.Path + ":",
				"default_timeout": "Task timed out after 2s"}
			for _, c := range cases {
				want[c.slug] = c.want
			}
			for slug, w := range want {
				r := waitRun(t, db.Pool, ids[slug], 60*time.Second)
				task := taskOf(t, db.Pool, ids[slug])
				if r.Status != "failed" || !strings.Contains(task.Error, w) {
					t.Errorf("%s: run %s, task %s: %q, want an error containing %q", slug, r.Status, task.Status, task.Error, w)
				}
			}
			if n := ledgerRows(t, db, ""); n != 1 {
				t.Errorf("%d rows in app.ledger, want only the good run's", n)
			}
			m := w.Metrics
			for code, n := range map[string]float64{"42501": 2, "refused": 5, "57014": 1, "max_rows": 1, "role_changed": 1} {
				var got float64
				for _, c := range cases {
					got += testutil.ToFloat64(m.SQLErrors.WithLabelValues(c.slug, "call", code))
				}
				if got != n {
					t.Errorf("sql errors %s: %v, want %v", code, got, n)
				}
			}
			// Rolled back: the nine that failed after their insert (the tenth, no_sql, ran no statement).
			var rolledBack float64
			for _, c := range cases {
				rolledBack += testutil.ToFloat64(m.SQLTransactions.WithLabelValues(c.slug, "call", "rolled_back"))
			}
			if rolledBack != float64(len(cases)) {
				t.Errorf("rolled back transactions: %v, want %d", rolledBack, len(cases))
			}
		})
	}
}

// A transactional step's writes commit with its completion or not at all: a handler that
// fails after writing, a write PostgreSQL refuses only at COMMIT (a deferred constraint),
// and a task pgflow takes back while its handler runs all leave nothing; the retry that
// succeeds leaves exactly one row.
func TestTransactionalWritesCommitWithTheCompletion(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	if _, err := db.Pool.Exec(context.Background(), `
		create function app.no_13() returns trigger language plpgsql as $$
		begin if new.amount = 13 then raise exception 'amount 13 refused at commit'; end if; return null; end $$;
		create constraint trigger no_13 after insert on app.ledger deferrable initially deferred
		  for each row execute function app.no_13()`); err != nil {
		t.Fatal(err)
	}
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: tx
    max_attempts: 2
    base_delay: 0
    timeout: 30
    sql: {role: %s}
    steps:
      - {slug: call, module: "{{sql_call}}"}
`, role))
	startWorker(t, db.Pool, f, worker.Config{CancelCheckInterval: 100 * time.Millisecond})
	insert := func(run string, amount int, more ...string) string {
		stmts := []map[string]any{{"sql": "insert into app.ledger values ($1, 0, $2)", "params": []any{run, amount}}}
		for _, m := range more {
			stmts = append(stmts, map[string]any{"sql": m})
		}
		b, _ := json.Marshal(map[string]any{"statements": stmts})
		return string(b)
	}
	// The marker run_id keys the rows: the handler cannot read its own run id.
	failing := startRun(t, db.Pool, "tx", strings.Replace(insert("00000000-0000-4000-8000-00000000000a", 1), `]}`, `], "fail": "failed after writing"}`, 1))
	refused := startRun(t, db.Pool, "tx", insert("00000000-0000-4000-8000-00000000000b", 13))
	if r := waitRun(t, db.Pool, failing, 60*time.Second); r.Status != "failed" || taskOf(t, db.Pool, failing).Attempts != 2 {
		t.Errorf("failing: %s after %d attempts", r.Status, taskOf(t, db.Pool, failing).Attempts)
	}
	if r := waitRun(t, db.Pool, refused, 60*time.Second); r.Status != "failed" || !strings.Contains(taskOf(t, db.Pool, refused).Error,
		"committing the task's transaction failed, so nothing it wrote is kept") {
		t.Errorf("refused at commit: %s: %s", r.Status, taskOf(t, db.Pool, refused).Error)
	}

	// Taken back while it sleeps after writing: the first attempt is stopped and rolled back,
	// the retry writes the one row.
	slow := startRun(t, db.Pool, "tx", insert("00000000-0000-4000-8000-00000000000c", 1, "select pg_sleep(2)"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		var n int
		_ = db.Pool.QueryRow(context.Background(), `select count(*) from pg_stat_activity where query like '%pg_sleep(2)%' and state = 'active' and pid <> pg_backend_pid()`).Scan(&n)
		return n > 0, "the first attempt never reached its sleep"
	})
	if _, err := db.Pool.Exec(context.Background(), `select pgflow.fail_task($1::uuid, 'call', 0, 'taken back by the test')`, slow); err != nil {
		t.Fatal(err)
	}
	if r := waitRun(t, db.Pool, slow, 60*time.Second); r.Status != "completed" {
		t.Errorf("slow: %s (%s)", r.Status, r.Error)
	}
	for run, want := range map[string]int{"0a": 0, "0b": 0, "0c": 1} {
		if n := ledgerRows(t, db, "where run_id = '00000000-0000-4000-8000-0000000000"+run+"'"); n != want {
			t.Errorf("run %s: %d rows, want %d", run, n, want)
		}
	}
}

// A step whose role cannot be used, or is no wall, is refused before the worker serves,
// with the file, the line and what to run; allow_privileged_role lets a superuser role in.
func TestSQLRolesAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	super := db.Role(t, "super", "LOGIN SUPERUSER")
	nologin := db.Role(t, "nologin", "NOLOGIN")
	for _, c := range []struct{ sql, want string }{
		{"{role: no_such_role}", `flows.yaml:6): sql.role: role "no_such_role" does not exist: create it`},
		{"{role: " + nologin + "}", `role "` + nologin + `" cannot log in`},
		{"{role: " + nologin + ", password_env: PGFLOW_TEST_UNSET_PASSWORD}", `sql.password_env PGFLOW_TEST_UNSET_PASSWORD is not set`},
		{"{role: " + super + "}", `role "` + super + `" is a superuser`},
		{"{role: " + super + ", allow_privileged_role: true}", ""},
	} {
		f := flows(t, `
flows:
  - slug: roles
    steps:
      - slug: s
        sql: `+c.sql+`
        module: "{{sql_call}}"
`)
		workertest.Compile(t, db.Pool, f)
		w, err := worker.New(context.Background(), fastConfig(worker.Config{Flows: f, Pool: db.Pool, Engine: engine(t, "wazero")}))
		if err != nil {
			t.Fatal(err)
		}
		if err = w.Start(context.Background()); err == nil {
			w.Stop()
			err = w.Err()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.sql, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.sql, err, c.want)
		}
	}
}

// A task pgflow takes back while its handler runs, when this worker does not notice (its
// cancel check is off): the handler ends, the completion inside its transaction finds the
// attempt gone, and the transaction rolls back with the handler's row; the retry writes the
// only row.
func TestAStaleCompletionRollsBackItsWrites(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: stale
    max_attempts: 2
    base_delay: 0
    timeout: 30
    sql: {role: %s}
    steps:
      - {slug: call, module: "{{sql_call}}"}
`, role))
	w := startWorker(t, db.Pool, f, worker.Config{CancelCheckInterval: time.Hour, Log: slog.New(slog.NewTextHandler(workertest.TestWriter{T: t}, nil))})
	const marker = "00000000-0000-4000-8000-0000000000dd"
	run := startRun(t, db.Pool, "stale", `{"statements": [{"sql": "insert into app.ledger values ($1, 0, 1)", "params": ["`+marker+`"]},
		{"sql": "select pg_sleep(1.5)"}]}`)
	waitFor(t, 20*time.Second, func() (bool, string) {
		var n int
		_ = db.Pool.QueryRow(context.Background(), `select count(*) from pg_stat_activity where query like '%pg_sleep(1.5)%' and state = 'active' and pid <> pg_backend_pid()`).Scan(&n)
		return n > 0, "the first attempt never reached its sleep"
	})
	if _, err := db.Pool.Exec(context.Background(), `select pgflow.fail_task($1::uuid, 'call', 0, 'taken back by the test')`, run); err != nil {
		t.Fatal(err)
	}
	if r := waitRun(t, db.Pool, run, 60*time.Second); r.Status != "completed" {
		t.Fatalf("%s (%s)", r.Status, r.Error)
	}
	if n := ledgerRows(t, db, "where run_id = '"+marker+"'"); n != 1 {
		t.Errorf("%d rows, want the retry's one", n)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		rb := testutil.ToFloat64(w.Metrics.SQLTransactions.WithLabelValues("stale", "call", "rolled_back"))
		c := testutil.ToFloat64(w.Metrics.SQLTransactions.WithLabelValues("stale", "call", "committed"))
		return rb == 1 && c == 1, fmt.Sprintf("rolled back %v, committed %v; want 1 and 1", rb, c)
	})
}

// The connection dies while COMMIT runs (the server ends the backend during a deferred
// trigger): the worker cannot know whether the task's writes and completion landed, so it
// leaves the task started and forgets it; the hand-back finds it still started (the commit
// did not land) and requeues it without spending an attempt (max_attempts 1), keeping the
// reason in the attempt history, and the second start writes the only row.
func TestALostCommitAnswerLeavesTheTaskToTheHandBack(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	if _, err := db.Pool.Exec(context.Background(), `
		create sequence app.commits;
		create function app.slow_first_commit() returns trigger language plpgsql as $$
		begin if nextval('app.commits') = 1 then perform pg_sleep(30); end if; return null; end $$;
		create constraint trigger slow_first_commit after insert on app.ledger deferrable initially deferred
		  for each row execute function app.slow_first_commit();
		-- The trigger runs at COMMIT on the step role's session, as the role.
		grant usage on sequence app.commits to `+role); err != nil {
		t.Fatal(err)
	}
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: lost
    max_attempts: 1
    timeout: 60
    sql: {role: %s}
    steps:
      - {slug: call, module: "{{sql_call}}"}
`, role))
	logs := &syncBuffer{}
	startWorker(t, db.Pool, f, worker.Config{Log: slog.New(slog.NewTextHandler(logs, nil))})
	const marker = "00000000-0000-4000-8000-0000000000ee"
	run := startRun(t, db.Pool, "lost", `{"statements": [{"sql": "insert into app.ledger values ($1, 0, 1)", "params": ["`+marker+`"]}]}`)
	var pid int
	waitFor(t, 20*time.Second, func() (bool, string) {
		_ = db.Pool.QueryRow(context.Background(), `select pid from pg_stat_activity where query = 'commit' and state = 'active'
			and wait_event = 'PgSleep'`).Scan(&pid)
		return pid != 0, "the COMMIT never reached the trigger's sleep"
	})
	if _, err := db.Pool.Exec(context.Background(), `select pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	r := waitRun(t, db.Pool, run, 60*time.Second)
	task := taskOf(t, db.Pool, run)
	// The start whose commit did not land is given back: the second start is attempt 1 again.
	if r.Status != "completed" || task.Attempts != 1 {
		t.Fatalf("run %s at attempt %d (%s): want completed, the lost start given back", r.Status, task.Attempts, r.Error)
	}
	if n := ledgerRows(t, db, "where run_id = '"+marker+"'"); n != 1 {
		t.Errorf("%d rows, want the retry's one", n)
	}
	handBack := logs.String()
	if !strings.Contains(handBack, "the answer to the COMMIT of its transactional step's writes and completion was lost") ||
		!strings.Contains(handBack, "so the commit did not land and nothing the handler wrote is kept") {
		t.Errorf("the log does not say why the task was requeued:\n%s", handBack)
	}
}

// No statement parameter reaches the worker's log, at debug level, nor a task's error:
// PostgreSQL's message quoting one gets its $n instead.
func TestSQLParametersStayOutOfLogs(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: quiet
    max_attempts: 1
    sql: {role: %s}
    steps:
      - {slug: call, module: "{{sql_call}}"}
`, role))
	var logs syncBuffer
	startWorker(t, db.Pool, f, worker.Config{Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const secret = "t0ps3cret-param"
	ok := startRun(t, db.Pool, "quiet", `{"statements": [{"sql": "select length($1::text) as n", "params": ["`+secret+`"]}]}`)
	bad := startRun(t, db.Pool, "quiet", `{"statements": [{"sql": "insert into app.ledger values ($1, 0, 1)", "params": ["`+secret+`"]}]}`)
	if r := waitRun(t, db.Pool, ok, 30*time.Second); r.Status != "completed" {
		t.Fatalf("ok: %s (%s)", r.Status, r.Error)
	}
	if r := waitRun(t, db.Pool, bad, 30*time.Second); r.Status != "failed" {
		t.Fatalf("bad: %s", r.Status)
	}
	task := taskOf(t, db.Pool, bad)
	if !strings.Contains(task.Error, `invalid input syntax for type uuid: "$1" (SQLSTATE 22P02)`) || strings.Contains(task.Error, secret) {
		t.Errorf("the task's error: %q", task.Error)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "task failed for good"), "the failure was not logged"
	})
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the worker's log shows a parameter:\n%s", logs.String())
	}
}

// A non-transactional step commits each statement alone, so a failed attempt's writes stay:
// an unkeyed insert runs once per attempt, an insert keyed by the context's idempotency_key
// (the documented way, abi/SPEC.md) lands once.
func TestNonTransactionalWritesAreKeyedByTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	if _, err := db.Pool.Exec(context.Background(), `
		create table app.mail (idempotency_key text primary key, attempt int);
		grant select, insert on app.mail to `+role); err != nil {
		t.Fatal(err)
	}
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: keyed
    max_attempts: 2
    base_delay: 0
    sql: {role: %s, transactional: false}
    steps:
      - {slug: call, module: "{{sql_call}}"}
`, role))
	startWorker(t, db.Pool, f, worker.Config{})
	const marker = "00000000-0000-4000-8000-0000000000ff"
	run := startRun(t, db.Pool, "keyed", `{"fail_on_attempt": 1, "statements": [
		{"sql": "insert into app.ledger values ($1, 0, 1)", "params": ["`+marker+`"]},
		{"sql": "insert into app.mail values ($1, $2) on conflict (idempotency_key) do nothing",
		 "params": ["{{idempotency_key}}", "{{attempt}}"]}]}`)
	if r := waitRun(t, db.Pool, run, 60*time.Second); r.Status != "completed" || taskOf(t, db.Pool, run).Attempts != 2 {
		t.Fatalf("%s after %d attempts (%s)", r.Status, taskOf(t, db.Pool, run).Attempts, r.Error)
	}
	if n := ledgerRows(t, db, "where run_id = '"+marker+"'"); n != 2 {
		t.Errorf("the unkeyed insert left %d rows, want one per attempt (2)", n)
	}
	var key string
	var attempt, n int
	if err := db.Pool.QueryRow(context.Background(), `select count(*), min(idempotency_key), min(attempt) from app.mail`).Scan(&n, &key, &attempt); err != nil {
		t.Fatal(err)
	}
	if n != 1 || key != run+":call:0" || attempt != 1 {
		t.Errorf("app.mail: %d rows, key %q, attempt %d; want the first attempt's one row keyed %s:call:0", n, key, attempt, run)
	}
}

// A TypeScript handler in a transactional step catches a failed statement and goes on, as
// with postgres.js: its writes before and after (one in a sql.begin block) commit with its
// completion, once; an attempt that fails after writing leaves nothing, and its retry writes
// the rows once.
func TestACaughtStatementLeavesTheTaskExactlyOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: caught
    max_attempts: 2
    base_delay: 0
    sql: {role: %s}
    steps:
      - {slug: call, module: "{{caught_ts}}"}
`, role))
	w := startWorker(t, db.Pool, f, worker.Config{})
	ok := startRun(t, db.Pool, "caught", `{}`)
	retried := startRun(t, db.Pool, "caught", `{"fail": true}`)
	for _, c := range []struct {
		run      string
		attempts int
	}{{ok, 1}, {retried, 2}} {
		if r := waitRun(t, db.Pool, c.run, 60*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", c.run, r.Status, r.Error)
		}
		k := taskOf(t, db.Pool, c.run)
		jsonEqual(t, []byte(k.Output), `{"code": "22P02", "n": 2, "total": 3}`)
		if k.Attempts != c.attempts {
			t.Errorf("run %s: %d attempts, want %d", c.run, k.Attempts, c.attempts)
		}
		if n := ledgerRows(t, db, "where run_id = '"+c.run+"'"); n != 2 {
			t.Errorf("run %s: %d rows, want 2", c.run, n)
		}
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		c := testutil.ToFloat64(w.Metrics.SQLTransactions.WithLabelValues("caught", "call", "committed"))
		rb := testutil.ToFloat64(w.Metrics.SQLTransactions.WithLabelValues("caught", "call", "rolled_back"))
		return c == 2 && rb == 1, fmt.Sprintf("committed %v, rolled back %v; want 2 and 1", c, rb)
	})
}
