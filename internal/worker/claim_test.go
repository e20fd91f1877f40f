package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// A step's successors start in the transaction that completes it: pgflow stamps both with
// that transaction's now(), so each successor's started_at is its predecessor's
// completed_at, to the microsecond (for a step with several, that of the one whose
// transaction made it ready; here a map's three tasks and a single step). A step that waits for a start_delay is fetched when it is
// due. Every run completes.
func TestSuccessorsStartInTheTransactionThatCompletesTheirPredecessor(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: claims
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: m, type: map, module: "{{echo_map}}"}
      - {slug: c, depends_on: [a], module: "{{echo}}"}
      - {slug: b, depends_on: [a, m], module: "{{echo}}"}
      - {slug: late, depends_on: [b], start_delay: 1, module: "{{echo}}"}
`)
	// Slots to spare: a claim takes only free ones (at most a batch: here 10 successors at
	// most in one, under the 32 of a batch), and a fetch under way holds a batch's.
	startWorker(t, db.Pool, f, worker.Config{Concurrency: 200})
	var ids []string
	for range 5 {
		ids = append(ids, startRun(t, db.Pool, "claims", `[1, 2, 3]`))
	}
	for _, id := range ids {
		if r := waitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
	}
	// A successor is made ready by the transaction that completes its last predecessor task
	// to commit; now() is a transaction's start, so that need not be the latest completed_at
	// (two writers: the later one may wait for the earlier's lock on the run).
	rows, err := db.Pool.Query(context.Background(), `
		select s.step_slug, count(*), count(*) filter (where exists (
		    select 1 from pgflow.deps d
		    join pgflow.step_tasks p on p.run_id = s.run_id and p.step_slug = d.dep_slug
		    where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug and p.completed_at = s.started_at))
		from pgflow.step_tasks s
		where s.flow_slug = 'claims' and s.step_slug in ('b', 'c', 'late') group by s.step_slug`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	want := map[string][2]int{"b": {5, 5}, "c": {5, 5}, "late": {5, 0}}
	got := map[string][2]int{}
	for rows.Next() {
		var step string
		var n, same int
		if err := rows.Scan(&step, &n, &same); err != nil {
			t.Fatal(err)
		}
		got[step] = [2]int{n, same}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for step, w := range want {
		if got[step] != w {
			t.Errorf("step %s: %d tasks, %d started by their predecessor's completion; want %d, %d", step, got[step][0], got[step][1], w[0], w[1])
		}
	}
}

// A claim whose own statement fails takes its completions down with it, since they share a
// transaction: the completions are then written the plain way, and claims stop, so a broken
// claim costs one rollback per completion writer (each may have one in flight when the
// first fails, since awaited completions take the second writer at once), not one per
// batch. A trigger fails any start of a task in a transaction that completed its
// predecessor (a claim), counting its firings in a sequence (which a rollback does not
// undo). Every run completes, every successor is fetched.
func TestAFailedClaimLeavesItsCompletionsToThePlainWayAndStopsClaims(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		create sequence public.claim_trap;
		create function public.claim_trap() returns trigger language plpgsql as $$
		begin
		  if exists (select 1 from pgflow.step_tasks p join pgflow.deps d on d.flow_slug = p.flow_slug and d.dep_slug = p.step_slug
		             where p.run_id = new.run_id and d.step_slug = new.step_slug and p.completed_at = now()) then
		    perform nextval('public.claim_trap');
		    raise exception 'claim trap: % started in its predecessor''s transaction', new.step_slug;
		  end if;
		  return new;
		end $$;
		create trigger claim_trap before update of status on pgflow.step_tasks
		  for each row when (new.status = 'started') execute function public.claim_trap()`); err != nil {
		t.Fatal(err)
	}
	f := flows(t, `
flows:
  - slug: trapped
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: b, depends_on: [a], module: "{{echo}}"}
      - {slug: c, depends_on: [b], module: "{{echo}}"}
`)
	logs := &syncBuffer{}
	const writers = 2
	startWorker(t, db.Pool, f, worker.Config{Concurrency: 50, CompletionWriters: writers, Log: slog.New(slog.NewTextHandler(logs, nil))})
	var ids []string
	for range 4 {
		ids = append(ids, startRun(t, db.Pool, "trapped", `{"n": 1}`))
	}
	for _, id := range ids {
		if r := waitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
	}
	var fired int64
	var called bool
	if err := db.Pool.QueryRow(ctx, `select last_value, is_called from public.claim_trap`).Scan(&fired, &called); err != nil {
		t.Fatal(err)
	}
	if !called || fired > writers {
		t.Errorf("the trap fired %d times (called %v); want once, or once per writer: the first claims fail, and claims stop", fired, called)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `select max(attempts_count) from pgflow.step_tasks where flow_slug = 'trapped'`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("a task took %d attempts; a failed claim must spend none", attempts)
	}
	if !strings.Contains(logs.String(), "completions are written without it from now on") {
		t.Errorf("no warning that claims stopped; log:\n%s", logs.String())
	}
}

// A read of the queue leaves free a slot for each completion not yet written whose
// successor its transaction may start. Few slots and reads woken by every insert
// (--signal notify): a read under way held every free slot, so a claim during it found none
// and left its successor to a later read. Every successor of a chain starts in its
// predecessor's transaction.
func TestAReadLeavesTheClaimsTheirSlots(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: kept
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: b, depends_on: [a], module: "{{echo}}"}
      - {slug: c, depends_on: [b], module: "{{echo}}"}
      - {slug: d, depends_on: [c], module: "{{echo}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{Signal: pgflowtype.SignalNotify, Concurrency: 4})
	const runs = 16
	var ids []string
	for i := range runs {
		ids = append(ids, startRun(t, db.Pool, "kept", fmt.Sprintf(`{"n": %d}`, i)))
	}
	for _, id := range ids {
		if r := waitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
	}
	var successors, claimed int
	if err := db.Pool.QueryRow(context.Background(), `
		select count(*), count(*) filter (where p.completed_at = s.started_at)
		from pgflow.step_tasks s
		join pgflow.deps d on d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
		join pgflow.step_tasks p on p.run_id = s.run_id and p.step_slug = d.dep_slug
		where s.flow_slug = 'kept'`).Scan(&successors, &claimed); err != nil {
		t.Fatal(err)
	}
	if successors != 3*runs || claimed != successors {
		t.Errorf("%d of %d successors started in their predecessor's transaction; want all %d", claimed, successors, 3*runs)
	}
}

// Under notify, a claim that starts every successor its commit inserted wakes no read: the
// listener drops the notification of that commit, which would only find the messages gone.
// The first step of each run is read (start_flow's notification); the other four are claimed.
func TestAClaimThatStartsEverySuccessorWakesNoRead(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: quiet
    steps:
      - {slug: s1, module: "{{echo}}"}
      - {slug: s2, depends_on: [s1], module: "{{echo}}"}
      - {slug: s3, depends_on: [s2], module: "{{echo}}"}
      - {slug: s4, depends_on: [s3], module: "{{echo}}"}
      - {slug: s5, depends_on: [s4], module: "{{echo}}"}
`)
	w := startWorker(t, db.Pool, f, worker.Config{Signal: pgflowtype.SignalNotify, NotifyFallback: time.Hour})
	polls := func(result string) float64 {
		return testutil.ToFloat64(w.Metrics.Polls.WithLabelValues("quiet", result))
	}
	waitFor(t, time.Minute, func() (bool, string) { return polls("empty") >= 1, "the worker's first poll did not come back empty" })
	const runs = 4
	empty0 := polls("empty")
	runClaimedChains(t, db.Pool, "quiet", runs, 4)
	time.Sleep(500 * time.Millisecond) // a notification still on its way would wake a read now
	// Every claimed hop woke an empty read before; a late notification (past its wait on a
	// loaded machine) may still wake one.
	if n := polls("empty") - empty0; n > runs {
		t.Errorf("%.0f empty reads for %d claimed hops: the claims' own notifications woke reads", n, runs*4)
	}
}

// A claim that leaves a successor behind (it may take only a batch: here one of two) still
// has it read at once, although the listener drops its commit's notification: the worker
// rings the queue itself. With an hour-long fallback poll, nothing else would read it.
func TestAClaimThatLeavesASuccessorBehindWakesARead(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: fan
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: b, depends_on: [a], module: "{{echo}}"}
      - {slug: c, depends_on: [a], module: "{{echo}}"}
      - {slug: d, depends_on: [b, c], module: "{{echo}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{Signal: pgflowtype.SignalNotify, NotifyFallback: time.Hour, BatchSize: 1})
	for range 3 {
		id := startRun(t, db.Pool, "fan", `{"n": 1}`)
		if r := waitRun(t, db.Pool, id, time.Minute); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s): a successor the claim left behind was not read", id, r.Status, r.Error)
		}
	}
}

// A claiming write is one round trip: the batch that completes a step and reads its
// successor's message also starts that successor's task and commits, so the transaction
// holding the run's lock waits for no second round trip. Every round trip of the worker's
// connections is seen through a pgx tracer: each batch that reads successors must start
// them and end with the commit.
func TestAClaimingWriteIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	batches := &batchLog{}
	cfg.ConnConfig.Tracer = batches
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f := flows(t, `
flows:
  - slug: hops
    steps:
      - {slug: s1, module: "{{echo}}"}
      - {slug: s2, depends_on: [s1], module: "{{echo}}"}
      - {slug: s3, depends_on: [s2], module: "{{echo}}"}
      - {slug: s4, depends_on: [s3], module: "{{echo}}"}
`)
	startWorker(t, pool, f, worker.Config{})
	const runs = 3
	runClaimedChains(t, db.Pool, "hops", runs, 3)
	reads := 0
	for _, b := range batches.all() {
		if !slices.ContainsFunc(b, func(sql string) bool {
			return strings.Contains(sql, "for update skip locked") && strings.Contains(sql, "candidates")
		}) {
			continue
		}
		reads++
		if !slices.ContainsFunc(b, func(sql string) bool { return strings.Contains(sql, "start_tasks(") }) || strings.TrimSpace(b[len(b)-1]) != "commit" {
			t.Errorf("a round trip reads successors but does not start them and commit:\n%s", strings.Join(b, "\n---\n"))
		}
	}
	if reads < runs*3 {
		t.Errorf("%d round trips read successors, want at least %d", reads, runs*3)
	}
}

// batchLog keeps the statements of every batch its connections send.
type batchLog struct {
	mu      sync.Mutex
	batches [][]string
}

func (l *batchLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (l *batchLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *batchLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	l.mu.Lock()
	l.batches = append(l.batches, sqls)
	l.mu.Unlock()
	return ctx
}

func (l *batchLog) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (l *batchLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (l *batchLog) all() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.batches)
}

// runClaimedChains runs runs runs of flow, a chain s1 -> s2 -> ... with hops successors per
// run, to completion, and fails unless every successor was started by its predecessor's
// transaction (a claim): the tests that call it are about claims.
func runClaimedChains(t *testing.T, pool *pgxpool.Pool, flow string, runs, hops int) {
	t.Helper()
	for range runs {
		id := startRun(t, pool, flow, `{"n": 1}`)
		if r := waitRun(t, pool, id, time.Minute); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
	}
	var claimed int
	if err := pool.QueryRow(context.Background(), `
		select count(*) from pgflow.step_tasks s join pgflow.step_tasks p
		  on p.run_id = s.run_id and p.step_slug = 's' || (substr(s.step_slug, 2)::int - 1)
		where s.flow_slug = $1 and s.step_slug <> 's1' and s.started_at = p.completed_at`, flow).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != runs*hops {
		t.Fatalf("%d of %d successors started by their predecessor's transaction: this test is about claims", claimed, runs*hops)
	}
}
