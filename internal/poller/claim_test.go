package poller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// A claim reads and starts its successors in the round trip that completes their
// predecessor, before anyone knows their ids: one batch completes m's only task, claims s
// (made ready by that completion) and commits. s is started for this worker with its input,
// its message hidden for s's own visibility (62 s, not the read's 30), and a second claim in
// the same batch, on a run with nothing ready, takes nothing: the ids the first read handed
// to its start are not the second's. On both pgmq layers.
func TestAClaimReadsAndStartsSuccessorsInTheCompletionsRoundTrip(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T) *pgtest.DB{
		"real pgmq 1.5.1": func(t *testing.T) *pgtest.DB {
			return pgtest.NewCluster(t, pgtest.ExtensionFiles(pgtest.RealPgmq(t))).NewDB(t)
		},
		"pgflow-wasm layer": func(t *testing.T) *pgtest.DB {
			return pgtest.NewDB(t, pgtest.Layer(schema.LayerSchema))
		},
	}
	for name, newDB := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			worker := setup(t, db)
			ctx := context.Background()
			var run, idle string
			if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('f', '[5]')`).Scan(&run); err != nil {
				t.Fatal(err)
			}
			f := fetcher(t, db, worker)
			tasks, err := f.Fetch(ctx, 1)
			if err != nil || len(tasks) != 1 {
				t.Fatalf("fetch = %v, %v; want m's one task", tasks, err)
			}
			// A second run whose m task is started and stays so: its s is not ready.
			if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('f', '[6]')`).Scan(&idle); err != nil {
				t.Fatal(err)
			}
			if more, err := f.Fetch(ctx, 1); err != nil || len(more) != 1 {
				t.Fatalf("second fetch = %v, %v", more, err)
			}
			m := tasks[0]
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			b := &pgx.Batch{}
			b.Queue(`begin`)
			results := make([]taskwrite.Result, 1)
			taskwrite.Queue(b, taskwrite.Complete, []taskwrite.Call{{RunID: m.RunID, StepSlug: m.StepSlug, TaskIndex: m.TaskIndex,
				Attempt: m.Attempt, Arg: `10`, WorkerID: m.WorkerID}}, results, taskwrite.Options{})
			claim := f.QueueClaim(conn, b, []string{run}, []string{"s"}, 1)
			nothing := f.QueueClaim(conn, b, []string{idle}, []string{"s"}, 1)
			if claim == nil || nothing == nil {
				t.Fatal("QueueClaim queued nothing: the fetcher reads the queue's table, so it can claim")
			}
			b.Queue(`commit`)
			sent := time.Now()
			if err := conn.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
			if err := claim.Err(); err != nil {
				t.Fatal(err)
			}
			if results[0].Stale || results[0].Status != "completed" {
				t.Fatalf("completion: %+v", results[0])
			}
			if n, left := claim.Read(); n != 1 || left {
				t.Errorf("the claim read %d (left some: %v), want s's one message and none left", n, left)
			}
			got := claim.Tasks(sent)
			if len(got) != 1 || got[0].RunID != run || got[0].StepSlug != "s" || got[0].Attempt != 1 || got[0].WorkerID != worker {
				t.Fatalf("claimed tasks = %+v, want s of run %s, attempt 1, this worker's", got, run)
			}
			if in := strings.ReplaceAll(string(got[0].Input), " ", ""); !strings.Contains(in, `"m":[10]`) {
				t.Errorf("s's input = %s, want m's outputs [10]", got[0].Input)
			}
			if n, _ := nothing.Read(); n != 0 || len(nothing.Tasks(sent)) != 0 || nothing.Err() != nil {
				t.Errorf("the claim on a run with nothing ready read %d, started %d (%v)", n, len(nothing.Tasks(sent)), nothing.Err())
			}
			var status, lastWorker string
			var hidden float64
			if err := db.Pool.QueryRow(ctx, `select st.status, st.last_worker_id::text, extract(epoch from q.vt - clock_timestamp())
				from pgflow.step_tasks st join pgmq.q_f q on q.msg_id = st.message_id
				where st.run_id = $1::uuid and st.step_slug = 's'`, run).Scan(&status, &lastWorker, &hidden); err != nil {
				t.Fatal(err)
			}
			if status != "started" || lastWorker != worker {
				t.Errorf("s is %s by %s, want started by %s", status, lastWorker, worker)
			}
			if hidden < 50 || hidden > 62.5 {
				t.Errorf("s's message is hidden for %.1f s, want about 62 (its step's timeout + 2, not the read's 30)", hidden)
			}
		})
	}
}

// A claim on a pgflow whose newest migration is not the one its worker prepared for starts
// nothing, although its batch commits (the batch's reader cannot stop the database midway):
// the database refuses the read, the claim's Err wraps dberr.ErrSchemaChanged, and the
// completion in the same batch stands. The successor stays queued, its message visible.
func TestAClaimOnAMigrationItWasNotPreparedForStartsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	worker := setup(t, db)
	newest, _ := schema.NewestMigration(ctx, db.Pool)
	if newest == "" {
		t.Skip("this database's pgflow was not installed by db install: no migration to compare")
	}
	f := fetcher(t, db, worker)
	f.SetWitness(newest)
	var run string
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('f', '[5]')`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	tasks, err := f.Fetch(ctx, 1)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("fetch = %v, %v; want m's one task", tasks, err)
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow_wasm.schema_migrations (name, sha256, pgflow_version)
		values ('99999999999999_later.sql', 'x', 'later')`); err != nil {
		t.Fatal(err)
	}
	m := tasks[0]
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`begin`)
	results := make([]taskwrite.Result, 1)
	taskwrite.Queue(b, taskwrite.Complete, []taskwrite.Call{{RunID: m.RunID, StepSlug: m.StepSlug, TaskIndex: m.TaskIndex,
		Attempt: m.Attempt, Arg: `10`, WorkerID: m.WorkerID}}, results, taskwrite.Options{})
	claim := f.QueueClaim(conn, b, []string{run}, []string{"s"}, 1)
	b.Queue(`commit`)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if err := claim.Err(); !errors.Is(err, dberr.ErrSchemaChanged) || !strings.Contains(err.Error(), "99999999999999_later.sql") {
		t.Fatalf("claim.Err() = %v, want dberr.ErrSchemaChanged naming the later migration", err)
	}
	if n, _ := claim.Read(); n != 0 || len(claim.Tasks(time.Now())) != 0 {
		t.Fatalf("the refused claim read %d and started %d", n, len(claim.Tasks(time.Now())))
	}
	var mStatus, sStatus string
	var visible bool
	if err := db.Pool.QueryRow(ctx, `select
		(select status from pgflow.step_tasks where run_id = $1::uuid and step_slug = 'm'),
		(select status from pgflow.step_tasks where run_id = $1::uuid and step_slug = 's'),
		(select q.vt <= now() from pgflow.step_tasks st join pgmq.q_f q on q.msg_id = st.message_id
		  where st.run_id = $1::uuid and st.step_slug = 's')`, run).Scan(&mStatus, &sStatus, &visible); err != nil {
		t.Fatal(err)
	}
	if mStatus != "completed" || sStatus != "queued" || !visible {
		t.Fatalf("after the refused claim: m %s, s %s (message visible: %v); want m completed, s queued and visible", mStatus, sStatus, visible)
	}
}
