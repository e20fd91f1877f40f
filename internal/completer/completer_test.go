package completer_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// startedTasks creates a one-step flow, starts n runs and starts their tasks as a worker
// would, returning them.
func startedTasks(t *testing.T, db *pgtest.DB, n int) []fetched.Task {
	t.Helper()
	ctx := context.Background()
	worker := kit.NewUUID()
	for _, q := range []string{
		`select pgflow.create_flow('c', 2, 0, 60)`,
		`select pgflow.add_step('c', 's')`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, 'c', 'test')`, worker); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('c', '{}') from generate_series(1, $1)`, n); err != nil {
		t.Fatal(err)
	}
	proto := db.Protocol(t)
	f := poller.NewFetcher(db.Pool, poller.FetcherConfig{Flow: "c", WorkerID: worker, QueueNames: proto.QueueNames, SetsVisibility: proto.Lifecycle,
		Visibility: func(string) int { return 62 }})
	tasks, err := f.Fetch(ctx, n)
	if err != nil || len(tasks) != n {
		t.Fatalf("fetch: %d tasks, %v", len(tasks), err)
	}
	return tasks
}

// collect runs a completer over outcomes and returns what it reported.
func collect(t *testing.T, db *pgtest.DB, outcomes []completer.Outcome) []completer.Written {
	t.Helper()
	var mu sync.Mutex
	var got []completer.Written
	c := completer.New(db.Pool, completer.Config{StopTimeout: 30 * time.Second, OnWritten: func(ws []completer.Written) {
		mu.Lock()
		got = append(got, ws...)
		mu.Unlock()
	}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, o := range outcomes {
		c.Add(o)
	}
	c.Stop()
	return got
}

func TestBatchWithAnOutputPgflowRefusesFallsBackPerTask(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tasks := startedTasks(t, db, 3)
	got := collect(t, db, []completer.Outcome{
		{Task: tasks[0], Output: []byte(`{"ok": 0}`)},
		{Task: tasks[1], Output: []byte(`1e999999`)}, // valid JSON, but numeric overflows in jsonb
		{Task: tasks[2], Failed: true, Error: "handler_error: nope"},
	})
	if len(got) != 3 {
		t.Fatalf("reported %d outcomes, want 3", len(got))
	}
	byRun := map[string]completer.Written{}
	for _, w := range got {
		byRun[w.Task.RunID] = w
	}
	if w := byRun[tasks[0].RunID]; w.Status != "completed" || w.Stale || w.Err != nil {
		t.Errorf("good output: %+v, want completed", w)
	}
	if w := byRun[tasks[1].RunID]; !w.Failed || !strings.Contains(w.Error, "pgflow could not store the handler's output") || w.Status != "queued" {
		t.Errorf("refused output: %+v, want turned into a failure that pgflow retries", w)
	}
	if w := byRun[tasks[2].RunID]; w.Status != "queued" || w.Attempts != 1 {
		t.Errorf("failure: %+v, want queued for its retry", w)
	}
	var output string
	if err := db.Pool.QueryRow(context.Background(), `select output::text from pgflow.step_tasks where run_id = $1::uuid`, tasks[0].RunID).Scan(&output); err != nil {
		t.Fatal(err)
	}
	if output != `{"ok": 0}` {
		t.Errorf("stored output %s, want {\"ok\": 0} exactly", output)
	}
}

func TestWritesAreGuardedByAttempt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tasks := startedTasks(t, db, 2)
	first := collect(t, db, []completer.Outcome{{Task: tasks[0], Failed: true, Error: "first failure"}})
	if len(first) != 1 || first[0].Status != "queued" {
		t.Fatalf("first failure: %+v", first)
	}
	// The same outcome again (a batch retried after it had in fact committed) and a late
	// completion of the same attempt: neither may touch the requeued task.
	again := collect(t, db, []completer.Outcome{
		{Task: tasks[0], Failed: true, Error: "first failure"},
		{Task: tasks[0], Output: []byte(`"late"`)},
	})
	for _, w := range again {
		if !w.Stale {
			t.Errorf("repeated write %+v was applied, want stale", w)
		}
		// The log says what happened: the first write had landed; the late completion met a
		// task another write had failed.
		want := "already written"
		if !w.Failed {
			want = `the task is queued after another writer failed it ("first failure")`
		}
		if !strings.Contains(w.StaleReason, want) {
			t.Errorf("stale %s: reason %q, want it to say %q", map[bool]string{true: "failure", false: "completion"}[w.Failed], w.StaleReason, want)
		}
	}
	var status string
	var attempts int
	if err := db.Pool.QueryRow(context.Background(), `select status, attempts_count from pgflow.step_tasks where run_id = $1::uuid`, tasks[0].RunID).
		Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "queued" || attempts != 1 {
		t.Errorf("task is %s after %d attempts, want still queued after 1", status, attempts)
	}
}

// An awaited completion does not wait behind a write in flight: the second writer takes it
// at once, while an outcome nobody awaits waits for the first writer's next transaction.
// The first write is held in flight by a lock the test takes on its run.
func TestAnAwaitedCompletionTakesTheSecondWriterAtOnce(t *testing.T) {
	t.Parallel()
	for _, atOnce := range []bool{true, false} {
		t.Run(map[bool]string{true: "awaited", false: "not awaited"}[atOnce], func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			ctx := context.Background()
			tasks := startedTasks(t, db, 2)
			blocker, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback(ctx)
			if _, err := blocker.Exec(ctx, `select 1 from pgflow.runs where run_id = $1::uuid for update`, tasks[0].RunID); err != nil {
				t.Fatal(err)
			}
			written := make(chan completer.Written, 2)
			c := completer.New(db.Pool, completer.Config{Writers: 2, StopTimeout: 30 * time.Second,
				OnWritten: func(ws []completer.Written) {
					for _, w := range ws {
						written <- w
					}
				}})
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer c.Stop()
			c.Add(completer.Outcome{Task: tasks[0], Output: []byte(`1`)})
			// The first writer is in flight, waiting for the lock, once the database says so.
			waitFor(t, db, `select count(*) = 1 from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`)
			c.Add(completer.Outcome{Task: tasks[1], Output: []byte(`2`), Awaited: atOnce})
			select {
			case w := <-written:
				if !atOnce {
					t.Fatalf("%s was written while the first write waited, though nobody awaited it", w.Task.RunID)
				}
				if w.Task.RunID != tasks[1].RunID || w.Status != "completed" {
					t.Fatalf("written first: %+v, want the awaited completion", w)
				}
			case <-time.After(map[bool]time.Duration{true: 30 * time.Second, false: 300 * time.Millisecond}[atOnce]):
				if atOnce {
					t.Fatal("the awaited completion waited for the first writer")
				}
			}
			if err := blocker.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[bool]int{true: 1, false: 2}[atOnce]
			for range want {
				select {
				case w := <-written:
					if w.Status != "completed" {
						t.Errorf("%+v, want completed", w)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("a completion was not written once the lock was gone")
				}
			}
		})
	}
}

// waitFor polls query (one boolean) until it is true.
func waitFor(t *testing.T, db *pgtest.DB, query string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		if err := db.Pool.QueryRow(context.Background(), query).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still false after 30 s: %s", query)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An awaited completion whose claim has nothing to do (no free slot, a draining worker) is
// committed in the transaction begun for the claim, on the same connection.
func TestAnAwaitedCompletionWithNothingToClaimIsWritten(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tasks := startedTasks(t, db, 2)
	var mu sync.Mutex // writers call both from their goroutines
	var asked int
	var got []completer.Written
	c := completer.New(db.Pool, completer.Config{StopTimeout: 30 * time.Second,
		Claim: func(*pgxpool.Conn, *pgx.Batch, []completer.Outcome) completer.Claim {
			mu.Lock()
			defer mu.Unlock()
			asked++
			return nil
		},
		OnWritten: func(ws []completer.Written) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ws...)
		}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Add(completer.Outcome{Task: tasks[0], Output: []byte(`1`), Awaited: true})
	c.Add(completer.Outcome{Task: tasks[1], Output: []byte(`2`), Awaited: true})
	c.Stop()
	if asked == 0 {
		t.Fatal("Config.Claim was not asked")
	}
	if len(got) != 2 {
		t.Fatalf("reported %d outcomes, want 2", len(got))
	}
	for _, w := range got {
		if w.Status != "completed" || w.Stale || w.Err != nil {
			t.Errorf("%+v, want completed", w)
		}
	}
	// Only this test's runs: an aged database (PGTEST_PLAN=aged) holds completed tasks of its own.
	var completed int
	if err := db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.step_tasks
		where status = 'completed' and run_id::text = any($1)`, []string{tasks[0].RunID, tasks[1].RunID}).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if completed != 2 {
		t.Errorf("%d tasks completed in the database, want 2", completed)
	}
}

// Awaited counts the awaited outcomes not yet written, in all and by flow (the worker's
// reads leave a slot free for each), and none once they are written.
func TestAwaitedCountsAwaitedOutcomesUntilWritten(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tasks := startedTasks(t, db, 3)
	c := completer.New(db.Pool, completer.Config{StopTimeout: 30 * time.Second})
	c.Add(completer.Outcome{Task: tasks[0], Output: []byte(`1`), Awaited: true})
	c.Add(completer.Outcome{Task: tasks[1], Output: []byte(`2`), Awaited: true})
	c.Add(completer.Outcome{Task: tasks[2], Output: []byte(`3`)})
	flow := tasks[0].FlowSlug
	if all, of := c.Awaited(flow); all != 2 || of != 2 {
		t.Fatalf("Awaited(%q) = %d, %d before any write, want 2, 2", flow, all, of)
	}
	if all, of := c.Awaited("another_flow"); all != 2 || of != 0 {
		t.Fatalf("Awaited(another_flow) = %d, %d, want 2, 0", all, of)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if all, of := c.Awaited(flow); all != 0 || of != 0 {
		t.Errorf("Awaited(%q) = %d, %d once written, want 0, 0", flow, all, of)
	}
}

// AddReleasing runs its release (the worker frees the ended handler's slot there) once the
// outcome counts as awaited, so a read leaves the slot to its claim, and before a writer can
// take the outcome, so the claim finds the slot free.
func TestAddReleasingReleasesBetweenCountingAndQueueing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tasks := startedTasks(t, db, 1)
	c := completer.New(db.Pool, completer.Config{StopTimeout: 30 * time.Second})
	flow := tasks[0].FlowSlug
	released := false
	c.AddReleasing(completer.Outcome{Task: tasks[0], Output: []byte(`1`), Awaited: true}, func() {
		released = true
		if _, of := c.Awaited(flow); of != 1 {
			t.Errorf("Awaited(%q) = %d when the slot is released, want 1: a read could take the claim's slot", flow, of)
		}
		if n := c.Pending(); n != 0 {
			t.Errorf("%d outcomes pending when the slot is released, want 0: a writer could claim before it is free", n)
		}
	})
	if !released {
		t.Fatal("release did not run")
	}
	if n := c.Pending(); n != 1 {
		t.Errorf("%d outcomes pending after AddReleasing, want 1", n)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if all, _ := c.Awaited(flow); all != 0 {
		t.Errorf("Awaited = %d once written, want 0", all)
	}
}
