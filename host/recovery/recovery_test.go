package recovery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/host/recovery"
	"github.com/pgflow-wasm/pgflow-wasm/internal/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/uuidv4"
)

// startedTask creates flow f (one step, the given attempts, timeout 1 s), starts one run and
// starts its task as worker w with the given last heartbeat.
func startedTask(t *testing.T, db *pgtest.DB, maxAttempts int, heartbeatAgo time.Duration) (worker, run string) {
	t.Helper()
	ctx := context.Background()
	worker = uuidv4.New()
	if _, err := db.Pool.Exec(ctx, `select pgflow.create_flow('f', $1, 0, 1)`, maxAttempts); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `select pgflow.add_step('f', 's')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name, last_heartbeat_at)
		values ($1::uuid, 'f', 'test', now() - make_interval(secs => $2))`, worker, heartbeatAgo.Seconds()); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('f', '{}')`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `select * from pgflow.start_tasks('f', (select array_agg(msg_id) from pgmq.read('f', 60, 10)), $1::uuid)`, worker); err != nil {
		t.Fatal(err)
	}
	return worker, run
}

func taskState(t *testing.T, db *pgtest.DB, run string) (status string, attempts int, msg string, visibleIn float64) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(), `select st.status, st.attempts_count, coalesce(st.error_message, ''),
		coalesce(extract(epoch from q.vt - clock_timestamp())::float8, -1)
		from pgflow.step_tasks st left join pgmq.q_f q on q.msg_id = st.message_id where st.run_id = $1::uuid`, run).
		Scan(&status, &attempts, &msg, &visibleIn)
	if err != nil {
		t.Fatal(err)
	}
	return
}

var cfg = recovery.Config{Flows: []string{"f"}, WorkerStaleAfter: 30 * time.Second, StartedMargin: time.Second}

func TestALiveWorkersTaskIsLeftAlone(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	_, run := startedTask(t, db, 3, 0)
	got, err := recovery.Sweep(context.Background(), db.Pool, cfg)
	if err != nil || len(got) != 0 {
		t.Fatalf("sweep = %+v, %v; want nothing recovered", got, err)
	}
	if status, _, _, _ := taskState(t, db, run); status != "started" {
		t.Errorf("task %s, want still started", status)
	}
}

func TestADeadWorkersTaskIsRequeuedAndVisible(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	worker, run := startedTask(t, db, 3, time.Hour)
	got, err := recovery.Sweep(context.Background(), db.Pool, cfg)
	if err != nil || len(got) != 1 {
		t.Fatalf("sweep = %+v, %v; want the task recovered", got, err)
	}
	status, attempts, msg, visibleIn := taskState(t, db, run)
	if status != "queued" || attempts != 1 {
		t.Errorf("task %s after %d attempts, want queued for attempt 2", status, attempts)
	}
	if !strings.Contains(msg, "its worker "+worker+" stopped heartbeating") {
		t.Errorf("message %q should name the dead worker", msg)
	}
	if visibleIn > 0.5 {
		t.Errorf("message visible in %.1f s, want now (base_delay 0)", visibleIn)
	}
}

func TestATaskPastItsTimeoutIsRequeuedThenFailsTheRunWhenAttemptsRunOut(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	_, run := startedTask(t, db, 1, 0) // live worker, one attempt only
	// Started 3 s ago: longer than its 1 s timeout plus the 1 s margin.
	if _, err := db.Pool.Exec(context.Background(), `update pgflow.step_tasks set queued_at = queued_at - interval '3 seconds', started_at = started_at - interval '3 seconds' where run_id = $1::uuid`, run); err != nil {
		t.Fatal(err)
	}
	got, err := recovery.Sweep(context.Background(), db.Pool, cfg)
	if err != nil || len(got) != 1 || got[0].Status != "failed" {
		t.Fatalf("sweep = %+v, %v; want the task failed (no attempts left)", got, err)
	}
	var runStatus string
	if err := db.Pool.QueryRow(context.Background(), `select status from pgflow.runs where run_id = $1::uuid`, run).Scan(&runStatus); err != nil {
		t.Fatal(err)
	}
	_, _, msg, _ := taskState(t, db, run)
	if runStatus != "failed" || !strings.Contains(msg, "longer ago than its timeout (1 s) plus 1 s") {
		t.Errorf("run %s, task message %q; want the run failed with the stall explained", runStatus, msg)
	}
}

func TestOneSweeperAtATime(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	_, _ = startedTask(t, db, 3, time.Hour)
	ctx := context.Background()
	// Another worker is sweeping: it holds the lock in an open transaction.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('pgflow-wasm:recovery'))`); err != nil {
		t.Fatal(err)
	}
	got, err := recovery.Sweep(ctx, db.Pool, cfg)
	if err != nil || len(got) != 0 {
		t.Fatalf("sweep while another runs = %+v, %v; want it to step aside", got, err)
	}
}

func TestASweeperNeverRequeuesItsOwnTasksForAStaleHeartbeat(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	// The worker's own heartbeat is an hour old (the database was away), but it is sweeping:
	// it is alive, and its task is within its timeout.
	worker, run := startedTask(t, db, 3, time.Hour)
	self := cfg
	self.Self = []string{worker}
	got, err := recovery.Sweep(context.Background(), db.Pool, self)
	if err != nil || len(got) != 0 {
		t.Fatalf("sweep = %+v, %v; want its own task left alone", got, err)
	}
	if status, _, _, _ := taskState(t, db, run); status != "started" {
		t.Errorf("task %s, want still started", status)
	}
}
