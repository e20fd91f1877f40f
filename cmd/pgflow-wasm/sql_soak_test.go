package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// SQLSoakRunsEnv sets how many runs TestTransactionalStepWritesOncePerTask starts: 150 by
// default, the 1,000 with SQL_SOAK_RUNS=1000.
const SQLSoakRunsEnv = "SQL_SOAK_RUNS"

// The Must-show of transactional steps: runs whose one step inserts a row keyed by its task
// (the ledger example in Rust, as a role of its own) while the worker, logged in as a login
// that is not a superuser, is killed with SIGKILL every few seconds and PostgreSQL restarts
// once. Every run whose amount is 13 fails for good (a deferred constraint refuses the row at
// COMMIT, every attempt). At the end: exactly one row for every completed run, none for a
// failed one, and each completed run's output counts only its own row.
func TestTransactionalStepWritesOncePerTask(t *testing.T) {
	t.Parallel()
	runs := 150
	if s := os.Getenv(SQLSoakRunsEnv); s != "" {
		var err error
		if runs, err = strconv.Atoi(s); err != nil || runs < 50 {
			t.Fatalf("%s=%q: want a number of runs, at least 50", SQLSoakRunsEnv, s)
		}
	}
	cluster := pgtest.NewCluster(t)
	db := cluster.NewDB(t)
	ctx := context.Background()
	role := db.Ledger(t)
	login := db.Role(t, "pgflow_worker", "LOGIN")
	if _, err := db.Pool.Exec(ctx, `
		create function app.no_13() returns trigger language plpgsql as $$
		begin if new.amount = 13 then raise exception 'amount 13 refused at commit'; end if; return null; end $$;
		create constraint trigger no_13 after insert on app.ledger deferrable initially deferred
		  for each row execute function app.no_13();
		-- Each insert takes 20 ms, so the kills find transactions open.
		create function app.slow() returns trigger language plpgsql as $$ begin perform pg_sleep(0.02); return new; end $$;
		create trigger slow before insert on app.ledger for each row execute function app.slow();`); err != nil {
		t.Fatal(err)
	}
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: ledger_soak
    max_attempts: 10
    base_delay: 0
    timeout: 10
    steps:
      - slug: record
        module: %q
        sql: {role: %s}
`, module(t, "modules/examples/rust/ledger.wasm"), role))
	if out, err := exec.Command(binary, "compile", "--flows", flows, "--database-url", db.URL).CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	if err := schema.EnsureAttemptHistory(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	// The last two grants are the test's own: its audit trigger on pgflow.step_tasks.
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(schema.WorkerGrants+`
		grant usage on schema pgtest_audit to %[1]s;
		grant insert on all tables in schema pgtest_audit to %[1]s;
		grant usage on all sequences in schema pgtest_audit to %[1]s;`, login)); err != nil {
		t.Fatal(err)
	}
	workerURL := db.URLAs(t, login)
	var workers []*worker
	serve := func() *worker {
		w := startServe(t, workerURL, flows, "--concurrency", "8", "--batch-size", "8", "--liveness-grace", "1s",
			"--log-level", "info")
		workers = append(workers, w)
		return w
	}
	current := serve()
	db.WaitServing(t, "ledger_soak")

	// The stream: all runs within about runs/15 seconds; a kill every 2.5 s; a restart of the
	// server halfway.
	started := map[int]string{}
	killed, restarted := 0, false
	nextKill := time.Now().Add(2500 * time.Millisecond)
	for i := 0; i < runs; {
		if time.Now().After(nextKill) {
			_ = current.cmd.Process.Signal(syscall.SIGKILL)
			_ = current.cmd.Wait()
			killed++
			current = serve()
			nextKill = time.Now().Add(2500 * time.Millisecond)
		}
		if !restarted && i >= runs/2 {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			if err := cluster.Restart(rctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			restarted = true
			t.Logf("the server restarted after %d runs", i)
		}
		var id string
		err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('ledger_soak', jsonb_build_object('amount', $1::int))`, i%50).Scan(&id)
		switch {
		case err == nil:
			started[i] = id
			i++
			time.Sleep(time.Second / 15)
		case dberr.Transient(err):
			time.Sleep(100 * time.Millisecond) // the restart: start the run again when the server is back
		default:
			t.Fatal(err)
		}
	}
	t.Logf("%d runs started, the worker killed %d times", len(started), killed)

	deadline := time.Now().Add(3 * time.Minute)
	for {
		var open int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'ledger_soak' and status = 'started'`).Scan(&open); err != nil {
			if !dberr.Transient(err) {
				t.Fatal(err)
			}
		} else if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs still open 3 minutes after the last one started", open)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var completed, failed, wrong, retried, rows int
	if err := db.Pool.QueryRow(ctx, `
		with r as (
		  select r.run_id, r.status, (r.input->>'amount')::int as amount, r.output,
		         (select count(*) from app.ledger l where l.run_id = r.run_id) as rows
		  from pgflow.runs r where r.flow_slug = 'ledger_soak')
		select count(*) filter (where status = 'completed'), count(*) filter (where status = 'failed'),
		       count(*) filter (where
		         (status = 'completed' and (amount = 13 or rows <> 1 or output->'record' <> jsonb_build_object('inserted', 1, 'total', amount)))
		         or (status = 'failed' and (amount <> 13 or rows <> 0))
		         or status not in ('completed', 'failed')),
		       (select count(*) from pgflow.step_tasks where flow_slug = 'ledger_soak' and attempts_count > 1 and status = 'completed'),
		       (select count(*) from app.ledger)
		from r`).Scan(&completed, &failed, &wrong, &retried, &rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs completed (%d of them after more than one attempt), %d failed for good; %d rows in app.ledger",
		completed, retried, failed, rows)
	if completed+failed != len(started) || wrong > 0 || rows != completed {
		t.Errorf("%d runs, %d completed, %d failed, %d rows: %d runs break the rule (one row per completed run, none per failed one)",
			len(started), completed, failed, rows, wrong)
	}
	if retried == 0 {
		t.Errorf("no completed task needed a second attempt: the faults hit nothing running, the test proves little")
	}
	var unknown, handedBack int
	for _, w := range workers {
		b, _ := os.ReadFile(w.log)
		unknown += strings.Count(string(b), "may or may not have committed")
		handedBack += strings.Count(string(b), "COMMIT answer was lost: the commit did not land")
	}
	t.Logf("COMMIT answers lost by the workers: %d, tasks requeued after one: %d", unknown, handedBack)
}

// The README's quick start, ledger part: scripts/ledger.sql, then the repository's own
// flows.yaml served as it is, and a run of its ledger flow writes its row to app.ledger.
func TestQuickStartLedgerWritesToTheApplicationsTable(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	script, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "ledger.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, string(script)); err != nil {
		t.Fatalf("scripts/ledger.sql: %v", err)
	}
	startServe(t, db.URL, filepath.Join(repoRoot(t), "flows.yaml"))
	db.WaitServing(t, "ledger")
	out, errOut, code := runBinary(t, []string{"DATABASE_URL=" + db.URL}, "start", "ledger", "--input", `{"amount": 5}`, "--wait", "--timeout", "1m")
	if code != 0 || !strings.Contains(out, `{"record": {"total": 5, "inserted": 1}}`) {
		t.Fatalf("start ledger --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var rows, amount int
	if err := db.Pool.QueryRow(ctx, `select count(*), sum(amount) from app.ledger`).Scan(&rows, &amount); err != nil || rows != 1 || amount != 5 {
		t.Fatalf("app.ledger: %d rows, sum %d (%v)", rows, amount, err)
	}
}
