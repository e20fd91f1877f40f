package poller_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// setup creates flow "f" (root map step "m" feeding single step "s"), registers a worker and
// returns its id.
func setup(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	ctx := context.Background()
	worker := kit.NewUUID()
	for _, q := range []string{
		`select pgflow.create_flow('f', 3, 1, 60)`,
		`select pgflow.add_step('f', 'm', step_type => 'map', timeout => 7)`,
		`select pgflow.add_step('f', 's', array['m'])`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, 'f', 'test')`, worker); err != nil {
		t.Fatal(err)
	}
	return worker
}

func fetcher(t testing.TB, db *pgtest.DB, worker string) *poller.Fetcher {
	proto := db.Protocol(t)
	return poller.NewFetcher(db.Pool, poller.FetcherConfig{Flow: "f", WorkerID: worker, QueueNames: proto.QueueNames, SetsVisibility: proto.Lifecycle,
		FlowInput: proto.FlowInput, MapStep: func(step string) bool { return step == "m" },
		Visibility: func(step string) int {
			if step == "m" {
				return 9
			}
			return 62
		}})
}

func TestFetchStartsTasksWithInputsAttemptsAndVisibility(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	worker := setup(t, db)
	ctx := context.Background()
	var run string
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('f', '["a", {"b": 1}, 0]')`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	tasks, err := fetcher(t, db, worker).Fetch(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 {
		t.Fatalf("got %d tasks, want the 2 asked for", len(tasks))
	}
	for i, want := range []string{`"a"`, `{"b": 1}`} {
		tk := tasks[i]
		if tk.RunID != run || tk.StepSlug != "m" || tk.TaskIndex != i || tk.Attempt != 1 {
			t.Errorf("task %d = %+v", i, tk)
		}
		if string(tk.Input) != want {
			t.Errorf("task %d input = %s, want the bare map element %s", i, tk.Input, want)
		}
		if string(tk.FlowInput) != `["a", {"b": 1}, 0]` {
			t.Errorf("task %d flow input = %s", i, tk.FlowInput)
		}
	}
	// set_vt_batch ran: the started messages are hidden for the step's visibility (9 s).
	var hidden float64
	if err := db.Pool.QueryRow(ctx, `select min(extract(epoch from vt - clock_timestamp())) from pgmq.q_f where msg_id = any($1::bigint[])`,
		[]int64{tasks[0].MsgID, tasks[1].MsgID}).Scan(&hidden); err != nil {
		t.Fatal(err)
	}
	if hidden < 7 || hidden > 9.5 {
		t.Errorf("started messages hidden for %.1f s, want about 9 s (step timeout + 2)", hidden)
	}
	more, err := fetcher(t, db, worker).Fetch(ctx, 10)
	if err != nil || len(more) != 1 || string(more[0].Input) != "0" {
		t.Fatalf("second fetch = %v, %v; want the last element 0", more, err)
	}
	var input json.RawMessage = more[0].Input
	if string(input) != "0" {
		t.Errorf("falsy element lost: %s", input)
	}
}

func TestFetchSkipsATaskAnotherWorkerStartedFirst(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mine := setup(t, db)
	other := kit.NewUUID()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, 'f', 'test')`, other); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('f', '["only"]')`); err != nil {
		t.Fatal(err)
	}
	// The other worker read the message with vt 0 (so we read it too) and is inside
	// start_tasks, its transaction still open: the race pgflow's start_tasks loses.
	conn := db.Conn(t)
	var msg int64
	if err := conn.QueryRow(ctx, `select msg_id from pgmq.read('f', 0, 1)`).Scan(&msg); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `select * from `+db.StartTasks(t, `'f'`, `array[$1::bigint]`, `$2::uuid`), msg, other); err != nil {
		t.Fatal(err)
	}
	type result struct {
		tasks []fetched.Task
		err   error
	}
	got := make(chan result, 1)
	go func() {
		tasks, err := fetcher(t, db, mine).Fetch(ctx, 1)
		got <- result{tasks, err}
	}()
	time.Sleep(300 * time.Millisecond) // our start_tasks now waits for the other's row lock
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.tasks) != 0 {
		t.Fatalf("fetch returned %+v: a task another worker started would run twice", r.tasks)
	}
}

func TestBackoffStaysWithinBoundsAndResets(t *testing.T) {
	t.Parallel()
	b := kit.Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	sawMax := false
	for range 200 {
		d := b.Next()
		if d < b.Min || d > b.Max {
			t.Fatalf("wait %s outside [%s, %s]", d, b.Min, b.Max)
		}
		sawMax = sawMax || d > 60*time.Millisecond
	}
	if !sawMax {
		t.Error("waits never grew toward Max")
	}
	b.Reset()
	if d := b.Next(); d > 30*time.Millisecond {
		t.Errorf("first wait after Reset = %s, want within 3 x Min", d)
	}
}

func TestFetchReadsTheLongestVisibleMessagesFirst(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	worker := setup(t, db)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('f', '["a", "b", "c", "d"]')`); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := db.Pool.QueryRow(ctx, `select array_agg(msg_id order by msg_id) from pgmq.q_f`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	// The first message is being run (hidden), the last has been visible longest.
	if _, err := db.Pool.Exec(ctx, `update pgmq.q_f set vt = clock_timestamp() + case msg_id
		  when $1 then interval '1 hour' when $4 then interval '-1 minute' else interval '-10 seconds' end
		where msg_id = any(array[$1, $2, $3, $4]::bigint[])`, ids[0], ids[1], ids[2], ids[3]); err != nil {
		t.Fatal(err)
	}
	got, err := fetcher(t, db, worker).Fetch(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].TaskIndex == 0 || got[1].TaskIndex == 0 {
		t.Fatalf("fetched %+v; want 2 tasks, never the hidden element 0", got)
	}
	if got[1].TaskIndex != 3 {
		t.Errorf("fetched elements %d and %d; want the longest-visible element 3 among them", got[0].TaskIndex, got[1].TaskIndex)
	}
	var readCt int
	if err := db.Pool.QueryRow(ctx, `select read_ct from pgmq.q_f where msg_id = $1`, got[1].MsgID).Scan(&readCt); err != nil {
		t.Fatal(err)
	}
	if readCt != 1 {
		t.Errorf("read_ct = %d after one read, want 1 (as pgmq.read counts)", readCt)
	}

	// Without pgmq's index on vt the fetcher reads with pgmq.read: the remaining visible one.
	if _, err := db.Pool.Exec(ctx, `drop index pgmq.q_f_vt_idx`); err != nil {
		t.Fatal(err)
	}
	rest, err := fetcher(t, db, worker).Fetch(ctx, 10)
	if err != nil || len(rest) != 1 || rest[0].TaskIndex == 0 {
		t.Fatalf("fetch through pgmq.read = %+v, %v; want the one visible element left", rest, err)
	}

	// The fetch's asynchronous commit stays inside its transactions.
	for range 4 {
		var setting string
		if err := db.Pool.QueryRow(ctx, `show synchronous_commit`).Scan(&setting); err != nil {
			t.Fatal(err)
		}
		if setting != "on" {
			t.Fatalf("a pooled connection's synchronous_commit = %s after fetches, want on", setting)
		}
	}
}

// A fetch is one transaction: a start that fails undoes its read, so the messages are
// visible at once (not after the read's visibility) and their tasks still queued.
func TestAFailedStartLeavesTheMessagesVisible(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	setup(t, db)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('f', '["a", "b"]')`); err != nil {
		t.Fatal(err)
	}
	// start_tasks refuses a worker that pgflow.workers does not hold (a foreign key).
	unknown := kit.NewUUID()
	if tasks, err := fetcher(t, db, unknown).Fetch(ctx, 10); err == nil {
		t.Fatalf("fetch as an unregistered worker started %d tasks; want start_tasks' error", len(tasks))
	}
	var visible, readCt, queued int
	if err := db.Pool.QueryRow(ctx, `select count(*) filter (where vt <= clock_timestamp()), coalesce(sum(read_ct), 0)
		from pgmq.q_f`).Scan(&visible, &readCt); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where flow_slug = 'f' and status = 'queued'`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if visible != 2 || readCt != 0 || queued != 2 {
		t.Errorf("after the failed start: %d of 2 messages visible, read_ct total %d, %d tasks queued; want 2, 0, 2 (the read undone)", visible, readCt, queued)
	}
}

// A fetcher that expects pgflow 0.8's start_tasks on a database whose pgflow was upgraded to
// 0.12 or later under it (which leaves "run" out of a single step's input) still hands the
// handler ABI v1's input: "run" is put back wherever it is missing, whatever was expected.
func TestAnUpgradedPgflowStillGivesSingleStepsTheirRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t, pgtest.Empty())
	conn := db.Conn(t)
	if _, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: pgtest.PgflowRelease(t, 16), Layer: schema.LayerSchema}); err != nil {
		t.Fatal(err)
	}
	if !db.Protocol(t).FlowInput {
		t.Fatalf("pgflow 0.12.0 was installed but the database has %s", db.Protocol(t))
	}
	worker := setup(t, db)
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('f', '[{"b": 1}]')`); err != nil {
		t.Fatal(err)
	}
	f := poller.NewFetcher(db.Pool, poller.FetcherConfig{Flow: "f", WorkerID: worker, FlowInput: false,
		MapStep: func(step string) bool { return step == "m" }, Visibility: func(string) int { return 30 }})
	tasks, err := f.Fetch(ctx, 10)
	if err != nil || len(tasks) != 1 || string(tasks[0].Input) != `{"b": 1}` {
		t.Fatalf("fetching the map step's task: %+v, %v; want one task with its bare element", tasks, err)
	}
	if _, err := db.Pool.Exec(ctx, `select pgflow.complete_task($1::uuid, 'm', 0, '"done"')`, tasks[0].RunID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(tasks) == 1 && tasks[0].StepSlug == "m" && time.Now().Before(deadline) {
		if tasks, err = f.Fetch(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if len(tasks) == 0 {
			tasks = []fetched.Task{{StepSlug: "m"}}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(tasks) != 1 || tasks[0].StepSlug != "s" {
		t.Fatalf("fetching the single step's task: %+v", tasks)
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(tasks[0].Input, &in); err != nil || string(in["run"]) != `[{"b": 1}]` || string(in["m"]) != `["done"]` {
		t.Fatalf("the single step got %s, want {\"run\": [{\"b\": 1}], \"m\": [\"done\"]}", tasks[0].Input)
	}
}

// A fetcher told the newest migration its worker prepared for starts no task once `db
// install` has recorded another: the fetch fails with dberr.ErrSchemaChanged and leaves the
// message visible and its task queued, for the fetch after the worker prepared again.
func TestAFetchRefusesAMigrationItWasNotPreparedFor(t *testing.T) {
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
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('f', '[1]')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `insert into pgflow_wasm.schema_migrations (name, sha256, pgflow_version)
		values ('99999999999999_later.sql', 'x', 'later')`); err != nil {
		t.Fatal(err)
	}
	tasks, err := f.Fetch(ctx, 10)
	if !errors.Is(err, dberr.ErrSchemaChanged) || len(tasks) != 0 || !strings.Contains(err.Error(), "99999999999999_later.sql") {
		t.Fatalf("a fetch after a newer migration: %d tasks, %v; want none and dberr.ErrSchemaChanged naming it", len(tasks), err)
	}
	var queued, visible int
	if err := db.Pool.QueryRow(ctx, `select (select count(*) from pgflow.step_tasks where flow_slug = 'f' and status = 'queued'),
		(select count(*) from pgmq.q_f where vt <= now())`).Scan(&queued, &visible); err != nil || queued != 1 || visible != 1 {
		t.Fatalf("after the refused fetch: %d tasks queued, %d messages visible (%v); want 1 and 1", queued, visible, err)
	}
	f.SetWitness("99999999999999_later.sql")
	if tasks, err := f.Fetch(ctx, 10); err != nil || len(tasks) != 1 {
		t.Fatalf("a fetch prepared for the newer migration: %d tasks, %v; want the one", len(tasks), err)
	}
}
