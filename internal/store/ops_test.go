package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/dashtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// Runs started through pgflow.start_flow with chosen ids: two share their first 8 hex
// digits, a third differs in the 8th.
func TestSearchRunsByPrefixOrPart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	ids := []string{
		"abcdef01-0000-4000-8000-000000000001",
		"abcdef01-0000-4000-8000-000000000002",
		"abcdef02-0000-4000-8000-0000000000aa",
	}
	for _, id := range ids {
		if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow(flow_slug => 'one', input => '{}'::jsonb, run_id => $1::uuid)`, id); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, db)
	found := func(q string) store.SearchResult {
		t.Helper()
		res, err := s.SearchRuns(ctx, q, 10)
		if err != nil {
			t.Fatalf("SearchRuns(%q): %v", q, err)
		}
		return res
	}
	runIDs := func(res store.SearchResult) []string {
		var out []string
		for _, r := range res.Runs {
			if r.Flow != pgtest.WarmFlow { // an aged database's random run ids may hold the text too
				out = append(out, r.ID)
			}
		}
		slices.Sort(out)
		return out
	}
	for q, want := range map[string][]string{
		"abcdef02":      ids[2:],  // one run by an 8-character prefix
		"ABCDEF01":      ids[:2],  // any case
		"abcdef01-0000": ids[:2],  // with the id's hyphens
		"abcdef0":       ids,      // every run it begins
		ids[1]:          ids[1:2], // the whole id
	} {
		if res := found(q); !res.Prefix || fmt.Sprint(runIDs(res)) != fmt.Sprint(want) {
			t.Errorf("SearchRuns(%q) = %v (prefix %v), want %v", q, runIDs(res), res.Prefix, want)
		}
	}
	// No id begins with the text: the ids that contain it.
	if res := found("00aa"); res.Prefix || fmt.Sprint(runIDs(res)) != fmt.Sprint(ids[2:]) {
		t.Errorf("SearchRuns(00aa) = %v (prefix %v), want the run whose id ends in it", runIDs(res), res.Prefix)
	}
	if res := found("beef"); len(runIDs(res)) != 0 {
		t.Errorf("SearchRuns(beef) = %v, want none", runIDs(res))
	}
	if res, err := s.SearchRuns(ctx, "abcdef0", 2); err != nil || len(res.Runs) != 2 || !res.More {
		t.Errorf("SearchRuns limited to 2: %d runs, more %v, %v; want 2 and more", len(res.Runs), res.More, err)
	}
	for _, q := range []string{"abc", "not-hex!", ""} {
		if _, err := s.SearchRuns(ctx, q, 10); err == nil {
			t.Errorf("SearchRuns(%q) accepted", q)
		}
	}
}

// A task that failed twice and then completed: a page of the step's tasks names both
// failed attempts (pgflow's row keeps only the last error).
func TestTasksCarryTheirEarlierAttempts(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	file := workertest.FlowsFile(t, `
flows:
  - slug: flaky
    max_attempts: 3
    base_delay: 0
    steps:
      - {slug: f, module: {{root}}/modules/testdata/flaky.wasm}
`, nil)
	w := workertest.StartWorker(t, db.Pool, file, worker.Config{})
	id := workertest.StartRun(t, db.Pool, "flaky", `{"succeed_on": 3}`)
	if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
		t.Fatalf("run: %s %s", r.Status, r.Error)
	}
	s := open(t, db)
	steps, err := s.Steps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := s.Tasks(ctx, id, steps[0], 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || len(tasks[0].Earlier) != 2 {
		t.Fatalf("tasks %+v, want one with two earlier attempts", tasks)
	}
	for i, a := range tasks[0].Earlier {
		if a.Attempt != i+1 || a.WorkerID != w.WorkerIDs()["flaky"] || !strings.Contains(a.Error, fmt.Sprintf("attempt %d failed", i+1)) {
			t.Errorf("earlier attempt %d: %+v", i+1, a)
		}
	}
}

// 1,000 runs over the last day, settled through pgflow's functions: each window's totals
// and buckets count them as a count in Go does, and the queue's depth counts the messages
// a worker could read now.
func TestFlowStatsAndQueues(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	runs, now := dashtest.StartStatsRuns(t, db, 1000)
	s := open(t, db)
	stats, _, err := s.FlowStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws := stats["busy"]
	if len(ws) != len(store.StatsWindows) {
		t.Fatalf("windows of busy: %+v", ws)
	}
	for _, w := range ws {
		want := dashtest.WantStats(runs, now, w.Window.Span)
		got := w.Total
		if got.Started != want.Started || got.Completed != want.Completed || got.Failed != want.Failed ||
			absDur(got.P50-want.P50) > time.Millisecond || absDur(got.P95-want.P95) > time.Millisecond {
			t.Errorf("last %s: %+v, want %+v", w.Window.Name, got, want)
		}
		var sum store.RunStats
		for _, b := range w.Buckets {
			sum.Started, sum.Completed, sum.Failed = sum.Started+b.Started, sum.Completed+b.Completed, sum.Failed+b.Failed
		}
		if len(w.Buckets) != w.Window.Buckets || sum.Started != got.Started || sum.Completed != got.Completed || sum.Failed != got.Failed {
			t.Errorf("last %s: %d buckets adding up to %+v, want %d adding up to the totals", w.Window.Name, len(w.Buckets), sum, w.Window.Buckets)
		}
	}
	if day := ws[1].Total; day.Started != 1000 || day.Completed != 800 || day.Failed != 100 || day.Running != 100 {
		t.Errorf("last day: %+v, want 1000 started, 800 completed, 100 failed, 100 running", day)
	}

	// 100 messages wait; a worker takes 10 of them (hidden for 60 s), and the oldest of the
	// rest is made 5 minutes old.
	if _, err := db.Pool.Exec(ctx, `select count(*) from pgmq.read('busy', 60, 10)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `update pgmq.q_busy set enqueued_at = now() - interval '5 minutes'
		where msg_id = (select min(msg_id) from pgmq.q_busy where vt <= clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	queues, err := s.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queues = slices.DeleteFunc(queues, func(q store.Queue) bool { return q.Flow == pgtest.WarmFlow })
	if len(queues) != 1 || queues[0].Flow != "busy" || queues[0].Visible != 90 || queues[0].Total != 100 ||
		queues[0].Oldest < 5*time.Minute || queues[0].Oldest > time.Hour {
		t.Errorf("queues %+v, want busy's with 90 visible of 100, the oldest visible 5 minutes old", queues)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// pgflow allows upper-case letters in a flow's slug; pgmq names the queue's table after it
// lower-cased. The queue is found and counted, not reported missing.
func TestTheQueueOfAFlowWithUpperCaseLettersIsCounted(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	for _, q := range []string{`select pgflow.create_flow('MixedCase')`, `select pgflow.add_step('MixedCase', 'a')`,
		`select pgflow.start_flow('MixedCase', '{}'::jsonb)`, `select pgflow.start_flow('MixedCase', '{}'::jsonb)`} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	queues, err := open(t, db).Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(queues, func(q store.Queue) bool { return q.Flow == "MixedCase" })
	if i < 0 || queues[i].Missing || queues[i].Visible != 2 || queues[i].Total != 2 {
		t.Fatalf("queues %+v, want MixedCase's with 2 visible of 2", queues)
	}
}
