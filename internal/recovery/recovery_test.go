package recovery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/recovery"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// startedTask creates flow f (one step, the given attempts, timeout 1 s), starts one run and
// starts its task as a pgflow-wasm worker with the given last heartbeat.
func startedTask(t *testing.T, db *pgtest.DB, maxAttempts int, heartbeatAgo time.Duration) (worker, run string) {
	t.Helper()
	return startedTaskOf(t, db, liveness.FunctionName, maxAttempts, heartbeatAgo)
}

// startedTaskOf is startedTask for a worker of the given kind (pgflow.workers.function_name).
func startedTaskOf(t *testing.T, db *pgtest.DB, kind string, maxAttempts int, heartbeatAgo time.Duration) (worker, run string) {
	t.Helper()
	ctx := context.Background()
	worker = kit.NewUUID()
	if _, err := db.Pool.Exec(ctx, `select pgflow.create_flow('f', $1, 0, 1)`, maxAttempts); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `select pgflow.add_step('f', 's')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name, last_heartbeat_at)
		values ($1::uuid, 'f', $3, now() - make_interval(secs => $2))`, worker, heartbeatAgo.Seconds(), kind); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('f', '{}')`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `select * from `+db.StartTasks(t, `'f'`, `(select array_agg(msg_id) from pgmq.read('f', 60, 10))`, `$1::uuid`), worker); err != nil {
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

var cfg = recovery.Config{Flows: []string{"f"}, WorkerStaleAfter: 30 * time.Second, StartedMargin: time.Second,
	LivenessGrace: 2 * time.Second, ForeignStaleAfter: 10 * time.Minute}

// cfgOf is cfg for the pgflow db speaks, as the worker sets it.
func cfgOf(t *testing.T, db *pgtest.DB) recovery.Config {
	t.Helper()
	c, p := cfg, db.Protocol(t)
	c.PermanentlyStalled, c.QueueNames = p.Requeue, p.QueueNames
	return c
}

// ageTask moves a task's start (and queueing) back in time.
func ageTask(t *testing.T, db *pgtest.DB, run string, by time.Duration) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `update pgflow.step_tasks set queued_at = queued_at - make_interval(secs => $2),
		started_at = started_at - make_interval(secs => $2) where run_id = $1::uuid`, run, by.Seconds()); err != nil {
		t.Fatal(err)
	}
}

// holdLivenessLock takes worker's liveness lock on a session of its own, as a live worker does.
func holdLivenessLock(t *testing.T, db *pgtest.DB, worker string) {
	t.Helper()
	key, err := liveness.LockKey(worker)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Conn(t).Exec(context.Background(), `select pg_advisory_lock($1::int4, $2::int4)`, liveness.LockClass, key); err != nil {
		t.Fatal(err)
	}
}

func TestALiveWorkersTaskIsLeftAlone(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	_, run := startedTask(t, db, 3, 0)
	got, err := recovery.NewSweeper(db.Pool, cfgOf(t, db)).Sweep(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("sweep = %+v, %v; want nothing recovered", got, err)
	}
	if status, _, _, _ := taskState(t, db, run); status != "started" {
		t.Errorf("task %s, want still started", status)
	}
}

// A dead worker's task goes back to the queue the way pgflow's requeue_stalled_tasks puts
// it back: visible at once, and no attempt failed, so a step with one attempt survives.
func TestADeadWorkersTaskIsRequeuedAndVisibleWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	worker, run := startedTask(t, db, 1, time.Hour)
	got, err := recovery.NewSweeper(db.Pool, cfgOf(t, db)).Sweep(context.Background())
	if err != nil || len(got) != 1 {
		t.Fatalf("sweep = %+v, %v; want the task recovered", got, err)
	}
	if !got[0].Requeued || !strings.Contains(got[0].Reason, "its worker "+worker+" stopped heartbeating") {
		t.Errorf("recovered %+v: want it requeued, the reason naming the dead worker", got[0])
	}
	status, attempts, msg, visibleIn := taskState(t, db, run)
	if status != "queued" || attempts != 1 || msg != "" {
		t.Errorf("task %s after %d attempts, error %q: want queued, no failure recorded (max_attempts 1)", status, attempts, msg)
	}
	if visibleIn > 0.5 {
		t.Errorf("message visible in %.1f s, want now", visibleIn)
	}
	var lastWorker *string
	if err := db.Pool.QueryRow(context.Background(), `select last_worker_id::text from pgflow.step_tasks where run_id = $1::uuid`, run).
		Scan(&lastWorker); err != nil || lastWorker != nil {
		t.Errorf("last_worker_id %v (%v), want cleared as pgflow's requeue clears it", lastWorker, err)
	}
}

// Requeues are bounded as upstream's are: a task that stalls every time it runs (it kills
// its worker, say) is requeued MaxRequeues times, then its attempt is failed, and with one
// attempt the run fails with the reason, instead of going round forever.
func TestATaskThatStallsEveryTimeIsRequeuedUpToTheBoundThenFailsTheRun(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	worker, run := startedTask(t, db, 1, 0) // live worker, one attempt only
	holdLivenessLock(t, db, worker)
	requeues := 0
	for {
		// Started 3 s ago: longer than its 1 s timeout plus the 1 s margin.
		ageTask(t, db, run, 3*time.Second)
		got, err := recovery.NewSweeper(db.Pool, cfgOf(t, db)).Sweep(ctx)
		if err != nil || len(got) != 1 {
			t.Fatalf("sweep = %+v, %v; want the task recovered", got, err)
		}
		if !got[0].Requeued {
			if got[0].Status != "failed" || !strings.Contains(got[0].Reason, "longer ago than its timeout (1 s) plus 1 s") ||
				!strings.Contains(got[0].Reason, "not requeued again") {
				t.Fatalf("past the bound: %+v; want the attempt failed, saying why", got[0])
			}
			break
		}
		requeues++
		if requeues > taskwrite.MaxRequeues {
			t.Fatalf("requeued %d times, past the bound of %d", requeues, taskwrite.MaxRequeues)
		}
		// The worker starts it again, and it stalls again.
		if _, err := db.Pool.Exec(ctx, `select * from `+db.StartTasks(t, `'f'`, `(select array_agg(msg_id) from pgmq.read('f', 60, 10))`, `$1::uuid`), worker); err != nil {
			t.Fatal(err)
		}
	}
	if requeues != taskwrite.MaxRequeues {
		t.Errorf("requeued %d times before failing, want %d", requeues, taskwrite.MaxRequeues)
	}
	var runStatus string
	if err := db.Pool.QueryRow(ctx, `select status from pgflow.runs where run_id = $1::uuid`, run).Scan(&runStatus); err != nil {
		t.Fatal(err)
	}
	if _, _, msg, _ := taskState(t, db, run); runStatus != "failed" || !strings.Contains(msg, "not requeued again") {
		t.Errorf("run %s, task message %q; want the run failed with the bound explained", runStatus, msg)
	}
}

func TestTwoSweepersAtOnceRequeueEachTaskOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	_, run := startedTask(t, db, 3, time.Hour)
	ctx := context.Background()
	results := make(chan []recovery.Recovered, 2)
	for range 2 {
		go func() {
			got, err := recovery.NewSweeper(db.Pool, cfgOf(t, db)).Sweep(ctx)
			if err != nil {
				t.Error(err)
			}
			results <- got
		}()
	}
	n := len(<-results) + len(<-results)
	if n != 1 {
		t.Fatalf("two sweepers recovered the task %d times, want once", n)
	}
	var requeued int
	if db.Protocol(t).Requeue {
		if err := db.Pool.QueryRow(ctx, `select requeued_count from pgflow.step_tasks where run_id = $1::uuid`, run).Scan(&requeued); err != nil || requeued != 1 {
			t.Errorf("requeued_count %d (%v), want 1", requeued, err)
		}
	}
	if status, attempts, _, _ := taskState(t, db, run); status != "queued" || attempts != 1 {
		t.Errorf("task %s after %d attempts, want queued after 1", status, attempts)
	}
}

func TestATaskWhoseOutcomeTheSweeperHoldsIsNeverRecovered(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	// The sweeper's own task, started longer ago than its timeout plus the margin: its
	// handler finished, but the database refused the outcome for a minute (a full disk).
	worker, run := startedTask(t, db, 1, 0)
	holdLivenessLock(t, db, worker)
	ageTask(t, db, run, 3*time.Second)
	held := cfgOf(t, db)
	held.Self = []string{worker}
	held.Holding = func(r, step string, index int) bool { return r == run && step == "s" && index == 0 }
	got, err := recovery.NewSweeper(db.Pool, held).Sweep(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("sweep = %+v, %v; want the held task left alone", got, err)
	}
	if status, attempts, _, _ := taskState(t, db, run); status != "started" || attempts != 1 {
		t.Errorf("task %s after %d attempts, want still started on attempt 1", status, attempts)
	}
	// Once the worker lets go of it (its outcome could not be kept), the timeout rule applies.
	held.Holding = func(string, string, int) bool { return false }
	if got, err := recovery.NewSweeper(db.Pool, held).Sweep(context.Background()); err != nil || len(got) != 1 {
		t.Fatalf("sweep = %+v, %v; want the task recovered once no longer held", got, err)
	}
}

func TestASweeperNeverRequeuesItsOwnTasksForAStaleHeartbeat(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	// The worker's own heartbeat is an hour old (the database was away), but it is sweeping:
	// it is alive, and its task is within its timeout.
	worker, run := startedTask(t, db, 3, time.Hour)
	self := cfgOf(t, db)
	self.Self = []string{worker}
	got, err := recovery.NewSweeper(db.Pool, self).Sweep(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("sweep = %+v, %v; want its own task left alone", got, err)
	}
	if status, _, _, _ := taskState(t, db, run); status != "started" {
		t.Errorf("task %s, want still started", status)
	}
}

func TestAWorkerWhoseLivenessLockIsGoneIsDeadWithinTheGrace(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	// Heartbeat 3 s old: fresh for the 30 s heartbeat rule, past the 2 s liveness grace.
	worker, run := startedTask(t, db, 3, 3*time.Second)
	holder := db.Conn(t)
	key, _ := liveness.LockKey(worker)
	if _, err := holder.Exec(context.Background(), `select pg_advisory_lock($1::int4, $2::int4)`, liveness.LockClass, key); err != nil {
		t.Fatal(err)
	}
	patient := cfgOf(t, db)
	patient.StartedMargin = time.Hour // only the lock may count here, not the 1 s timeout
	sweeper := recovery.NewSweeper(db.Pool, patient)
	if got, err := sweeper.Sweep(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("sweep while the lock is held = %+v, %v; want nothing recovered", got, err)
	}
	if sweeper.Suspects() {
		t.Fatal("Suspects while every lock is held")
	}
	holder.Close(context.Background()) // the worker process dies
	died := time.Now()
	var got []recovery.Recovered
	suspected := false
	for len(got) == 0 && time.Since(died) < 10*time.Second {
		var err error
		if got, err = sweeper.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			suspected = suspected || sweeper.Suspects()
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !suspected {
		t.Error("no sweep between the missed lock and the recovery said it suspects the worker")
	}
	if len(got) != 1 || !strings.Contains(got[0].Reason, "no session has held its liveness lock") {
		t.Fatalf("sweep after the worker died = %+v; want its task recovered as gone", got)
	}
	// Seen missing once, then again a grace later: not before.
	if took := time.Since(died); took < cfg.LivenessGrace {
		t.Errorf("recovered %s after the worker died, before the %s grace", took, cfg.LivenessGrace)
	}
	if status, attempts, _, _ := taskState(t, db, run); status != "queued" || attempts != 1 {
		t.Errorf("task %s after %d attempts, want queued", status, attempts)
	}
}

func TestAWorkerThatRetakesItsLockWithinTheGraceIsAlive(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	// Its connection broke: no lock for a moment, then it is back.
	worker, run := startedTask(t, db, 3, 0)
	patient := cfgOf(t, db)
	patient.StartedMargin = time.Hour // only the lock may count here, not the 1 s timeout
	sweeper := recovery.NewSweeper(db.Pool, patient)
	if got, err := sweeper.Sweep(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("sweep = %+v, %v; want nothing recovered", got, err)
	}
	time.Sleep(cfg.LivenessGrace / 2)
	holdLivenessLock(t, db, worker)
	time.Sleep(cfg.LivenessGrace)
	if got, err := sweeper.Sweep(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("sweep = %+v, %v; want nothing recovered", got, err)
	}
	if status, _, _, _ := taskState(t, db, run); status != "started" {
		t.Errorf("task %s, want still started", status)
	}
}

func TestAnotherKindOfWorkerIsJudgedByItsHeartbeatAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("past the step timeout with a live heartbeat: left alone, but for upstream's rule", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDB(t)
		_, run := startedTaskOf(t, db, "reference-ts", 1, 0)
		ageTask(t, db, run, 20*time.Second) // past its 1 s timeout, not past it plus 30 s
		if got, err := recovery.NewSweeper(db.Pool, cfgOf(t, db)).Sweep(ctx); err != nil || len(got) != 0 {
			t.Fatalf("sweep = %+v, %v; want a live TypeScript worker's task left alone", got, err)
		}
		ageTask(t, db, run, time.Hour) // far past its timeout plus 30 s
		got, err := recovery.NewSweeper(db.Pool, cfgOf(t, db)).Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !db.Protocol(t).Requeue {
			// pgflow before 0.13.2 has no requeue of its own to stand in for.
			if len(got) != 0 {
				t.Fatalf("sweep = %+v; want a live TypeScript worker's task left alone", got)
			}
			return
		}
		// No pg_cron runs pgflow's requeue_stalled_tasks here (the stand-in): the sweep does.
		if len(got) != 1 || !got[0].Requeued || !strings.Contains(got[0].Reason, "no pg_cron runs pgflow's requeue_stalled_tasks here") {
			t.Fatalf("sweep = %+v; want the task requeued by upstream's rule", got)
		}
		if status, attempts, _, _ := taskState(t, db, run); status != "queued" || attempts != 1 {
			t.Errorf("task %s after %d attempts, want queued", status, attempts)
		}
	})
	t.Run("heartbeat older than the foreign threshold: recovered", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDB(t)
		worker, run := startedTaskOf(t, db, "reference-ts", 3, 11*time.Minute)
		got, err := recovery.NewSweeper(db.Pool, cfgOf(t, db)).Sweep(ctx)
		if err != nil || len(got) != 1 || !strings.Contains(got[0].Reason, worker+" (reference-ts) stopped heartbeating") {
			t.Fatalf("sweep = %+v, %v; want the task recovered", got, err)
		}
		if status, _, _, _ := taskState(t, db, run); status != "queued" {
			t.Errorf("task %s, want queued", status)
		}
	})
	t.Run("foreign recovery off: never recovered", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDB(t)
		startedTaskOf(t, db, "reference-ts", 3, 24*time.Hour)
		off := cfgOf(t, db)
		off.ForeignStaleAfter = 0
		if got, err := recovery.NewSweeper(db.Pool, off).Sweep(ctx); err != nil || len(got) != 0 {
			t.Fatalf("sweep = %+v, %v; want nothing recovered", got, err)
		}
	})
}

// Readers counts, per own worker row, the pgflow-wasm workers of the same queue whose
// liveness lock is held: not a dead one (lock gone), not one of another kind, not one of
// another queue.
func TestReadersCountsTheLiveWorkersOfEachOwnQueue(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	row := func(queue, kind string, alive bool) string {
		id := kit.NewUUID()
		if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, $2, $3)`,
			id, queue, kind); err != nil {
			t.Fatal(err)
		}
		if alive {
			holdLivenessLock(t, db, id)
		}
		return id
	}
	selfF, selfG := row("f", liveness.FunctionName, true), row("g", liveness.FunctionName, true)
	row("f", liveness.FunctionName, true)  // a live peer on f
	row("f", liveness.FunctionName, false) // a dead one
	row("f", "pgflow-edge-worker", true)   // another kind (holds no liveness lock as a rule)
	row("h", liveness.FunctionName, true)  // a live worker of another queue
	c := cfgOf(t, db)
	c.Flows, c.Self = []string{"f", "g"}, []string{selfF, selfG}
	s := recovery.NewSweeper(db.Pool, c)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Readers(); got[selfF] != 2 || got[selfG] != 1 || len(got) != 2 {
		t.Fatalf("readers = %v, want 2 for %s (f) and 1 for %s (g)", got, selfF, selfG)
	}
}
