// Package dashtest holds what the dashboard's tests share with its browser tests (a module
// of their own, internal/dashboard/browsertest): a dashboard on a port, a token, a map whose
// elements fail on demand.
package dashtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
)

// Token is a dashboard token long enough to be accepted.
const Token = "a-test-token-of-32-characters-xx"

// NonLoopbackIP is an address of this machine other than loopback, or "" when it has none.
func NonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// Listen starts a dashboard on addr for the test, closed when it ends.
func Listen(t testing.TB, addr string, cfg dashboard.Config) *dashboard.Server {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := dashboard.Listen(context.Background(), addr, cfg)
	if err != nil {
		t.Fatalf("dashboard.Listen(%s): %v", addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("closing the dashboard: %v", err)
		}
	})
	return srv
}

// ManyFailFlows is a map of elements settled by StartManyFail.
const ManyFailFlows = `
flows:
  - slug: many_fail
    max_attempts: 1
    steps:
      - {slug: each, type: map, module: {{root}}/modules/testdata/work.wasm}
`

// ManyFailError is the error every failed element of StartManyFail carries.
const ManyFailError = "input.run.iterations must be a non-negative integer"

// StartManyFail runs a map of n elements of which those at the failing indices fail, and
// returns the run once they all settled. No worker runs it: the test settles every task
// through pgflow's own functions (read, start_tasks, complete_task, fail_task), starting
// them all before the first fails. A worker would start a task of a run that failed
// meanwhile never, so which elements fail would hang on its batching.
func StartManyFail(t testing.TB, db *pgtest.DB, n int, failing []int) string {
	t.Helper()
	if db.Protocol(t).Lifecycle && len(failing) > 1 {
		t.Skipf("pgflow %s cancels a failed run's other tasks, so a map ends with one failed element, not %d",
			db.Protocol(t).Version, len(failing))
	}
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, ManyFailFlows, nil))
	elements := make([]string, n)
	for i := range elements {
		elements[i] = `{"run": {"iterations": 0}}`
	}
	fails := map[int]bool{}
	for _, i := range failing {
		elements[i] = `{"run": {"iterations": -1}}`
		fails[i] = true
	}
	id := workertest.StartRun(t, db.Pool, "many_fail", "["+strings.Join(elements, ",")+"]")
	worker := kit.NewUUID()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`insert into pgflow.workers (worker_id, queue_name, function_name) values ($1, 'many_fail', 'dashtest')`, worker)
	var started int
	if err := db.Pool.QueryRow(ctx, `select count(*) from `+db.StartTasks(t, `'many_fail'`,
		`array(select msg_id from pgmq.read('many_fail', 60, $1))`, `$2::uuid`), n, worker).Scan(&started); err != nil {
		t.Fatal(err)
	}
	if started != n {
		t.Fatalf("started %d of the map's %d elements", started, n)
	}
	for i := range n {
		if !fails[i] {
			exec(`select pgflow.complete_task($1::uuid, 'each', $2, '{"iterations": 0}'::jsonb)`, id, i)
		}
	}
	for _, i := range failing {
		exec(`select pgflow.fail_task($1::uuid, 'each', $2, $3)`, id, i, fmt.Sprintf("element %d: %s", i, ManyFailError))
	}
	var got []int
	if err := db.Pool.QueryRow(ctx, `select coalesce(array_agg(task_index order by task_index), '{}')
		from pgflow.step_tasks where run_id = $1::uuid and status = 'failed'`, id).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(failing) {
		t.Fatalf("the elements that failed are %v, want %v", got, failing)
	}
	if r := workertest.WaitRun(t, db.Pool, id, 10*time.Second); r.Status != "failed" {
		t.Fatalf("run %s: %s, want failed", id, r.Status)
	}
	return id
}

// StatsFlows is the flow of StartStatsRuns: one step, one attempt.
const StatsFlows = `
flows:
  - slug: busy
    max_attempts: 1
    steps:
      - {slug: work, module: {{root}}/modules/testdata/echo.wasm}
`

// StatsRun is one run of StartStatsRuns as the database holds it.
type StatsRun struct {
	Status    string
	StartedAt time.Time
	Took      time.Duration // completed runs only
}

// StartStatsRuns starts n runs of StatsFlows in one statement through pgflow's start_flow
// and settles them through pgflow's own functions, as a worker would: of the first nine
// tenths of the queue's messages (read and started) eight in nine complete and one in nine
// fails; the rest stay queued. Then, because the statistics are about the past, the runs'
// times are moved back (the only write to pgflow's tables): the first tenth of the runs
// started within the last 50 minutes, the others between 70 minutes and 23 hours ago, far
// from the edges of the last hour and the last day, and a completed run took 1 to 10
// seconds. It returns the runs (by run id) and the database's time after the move.
func StartStatsRuns(t testing.TB, db *pgtest.DB, n int) ([]StatsRun, time.Time) {
	t.Helper()
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, StatsFlows, nil))
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`select count(*) from (select pgflow.start_flow('busy', '{}'::jsonb) from generate_series(1, $1)) s`, n)
	worker := kit.NewUUID()
	exec(`insert into pgflow.workers (worker_id, queue_name, function_name) values ($1, 'busy', 'dashtest')`, worker)
	read := n * 9 / 10
	var started int
	if err := db.Pool.QueryRow(ctx, `select count(*) from `+db.StartTasks(t, `'busy'`,
		`array(select msg_id from pgmq.read('busy', 60, $1))`, `$2::uuid`), read, worker).Scan(&started); err != nil {
		t.Fatal(err)
	}
	if started != read {
		t.Fatalf("started %d of %d tasks", started, read)
	}
	exec(`select count(*) from (select run_id, row_number() over (order by run_id) as i from pgflow.step_tasks
		where flow_slug = 'busy' and status = 'started') s, lateral pgflow.complete_task(s.run_id, 'work', 0, '{}'::jsonb)
		where s.i % 9 <> 0`)
	exec(`select count(*) from (select run_id from pgflow.step_tasks where flow_slug = 'busy' and status = 'started') s,
		lateral pgflow.fail_task(s.run_id, 'work', 0, 'work: the input was refused')`)
	exec(`with r as (select run_id, row_number() over (order by run_id) - 1 as k from pgflow.runs where flow_slug = 'busy'),
		t as (select run_id, k, clock_timestamp() - case when k < $1 then make_interval(secs => 5 + k * 3000.0 / $1)
		                                              else make_interval(secs => 4200 + (k - $1) * 78000.0 / ($2 - $1)) end as at
		      from r)
		update pgflow.runs u set started_at = t.at,
			completed_at = case when u.status = 'completed' then t.at + make_interval(secs => 1 + t.k % 10) end,
			failed_at = case when u.status = 'failed' then t.at + interval '1 second' end
		from t where u.run_id = t.run_id`, n/10, n)
	rows, err := db.Pool.Query(ctx, `select status, started_at, coalesce(completed_at - started_at, '0'::interval)
		from pgflow.runs where flow_slug = 'busy' order by run_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var runs []StatsRun
	for rows.Next() {
		var r StatsRun
		if err := rows.Scan(&r.Status, &r.StartedAt, &r.Took); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return runs, now
}

// StatsWant is what the statistics of runs should say over the period before now.
type StatsWant struct {
	Started, Completed, Failed int
	P50, P95                   time.Duration
}

// WantStats counts runs started within span before now, and the median and 95th percentile
// of the completed ones' durations (interpolated between ranks, as PostgreSQL's
// percentile_cont does).
func WantStats(runs []StatsRun, now time.Time, span time.Duration) StatsWant {
	var w StatsWant
	var took []time.Duration
	for _, r := range runs {
		if !r.StartedAt.After(now.Add(-span)) {
			continue
		}
		w.Started++
		switch r.Status {
		case "completed":
			w.Completed++
			took = append(took, r.Took)
		case "failed":
			w.Failed++
		}
	}
	slices.Sort(took)
	w.P50, w.P95 = percentile(took, 0.5), percentile(took, 0.95)
	return w
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	pos := p * float64(len(sorted)-1)
	lo := int(pos)
	if lo+1 >= len(sorted) {
		return sorted[lo]
	}
	frac := pos - float64(lo)
	return sorted[lo] + time.Duration(frac*float64(sorted[lo+1]-sorted[lo]))
}

// ShapedFailuresFlows are the flows of StartShapedFailures: three one-step flows, one attempt.
const ShapedFailuresFlows = `
flows:
  - slug: billing
    max_attempts: 1
    steps:
      - {slug: charge, module: {{root}}/modules/testdata/echo.wasm}
  - slug: refunds
    max_attempts: 1
    steps:
      - {slug: lookup, module: {{root}}/modules/testdata/echo.wasm}
  - slug: invoices
    max_attempts: 1
    steps:
      - {slug: decode, module: {{root}}/modules/testdata/echo.wasm}
`

// ShapedCause is one underlying cause of StartShapedFailures: how many tasks failed of it,
// in which flow/steps, and the shape its errors have.
type ShapedCause struct {
	Tasks int
	Steps []string
	Shape string
}

// StartShapedFailures fails 61 tasks, each in a run of its own, through pgflow's own
// functions (read, start_tasks, fail_task) with errors of three causes whose every message
// differs: customer ids, quoted values, timestamps, request uuids, HTTP ports and latencies,
// hex offsets and ids, and second lines. The one cause that two flows share spans both. It
// returns the causes, the largest first.
func StartShapedFailures(t testing.TB, db *pgtest.DB) []ShapedCause {
	t.Helper()
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, ShapedFailuresFlows, nil))
	worker := kit.NewUUID()
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1, 'billing', 'dashtest')`, worker); err != nil {
		t.Fatal(err)
	}
	fail := func(flow, step, msg string) {
		t.Helper()
		var run string
		if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow($1, '{}'::jsonb)`, flow).Scan(&run); err != nil {
			t.Fatal(err)
		}
		var started int
		if err := db.Pool.QueryRow(ctx, `select count(*) from `+db.StartTasks(t, `$1::text`,
			`array(select msg_id from pgmq.read($1::text, 60, 1))`, `$2::uuid`), flow, worker).Scan(&started); err != nil || started != 1 {
			t.Fatalf("starting the task of run %s: %d started (%v)", run, started, err)
		}
		if _, err := db.Pool.Exec(ctx, `select pgflow.fail_task($1::uuid, $2, 0, $3)`, run, step, msg); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 3, 9, 15, 0, 0, time.UTC)
	for i := range 30 { // one cause in two flows: a customer the payment provider does not know
		flow, step := "billing", "charge"
		if i%3 == 0 {
			flow, step = "refunds", "lookup"
		}
		fail(flow, step, fmt.Sprintf("customer cus_%d not found at %s (request %s, plan %q)\n  at provider.go:%d",
			1000+i*37, at.Add(time.Duration(i)*time.Minute).Format(time.RFC3339Nano), kit.NewUUID(), fmt.Sprintf("plan-%c", 'a'+i%5), 40+i))
	}
	for i := range 20 { // the tax service is down
		fail("billing", "charge", fmt.Sprintf("HTTP 503 from http://tax:%d/v2/rates after %d.%03ds, retry-after '%ds'",
			8000+i, i%4, 17*i, 5+i))
	}
	for i := range 11 { // a corrupt document
		fail("invoices", "decode", fmt.Sprintf("decoding invoice %x: unexpected byte 0x%02x at offset %d",
			0xdeadbeef00+uint64(i)*0x1f, 0x80+i, 4096*i+3))
	}
	return []ShapedCause{
		{30, []string{"billing/charge", "refunds/lookup"}, `customer cus_<n> not found at <time> (request <uuid>, plan "…")`},
		{20, []string{"billing/charge"}, `HTTP <n> from http://tax:<n>/v<n>/rates after <n>s, retry-after '…'`},
		{11, []string{"invoices/decode"}, `decoding invoice <hex>: unexpected byte <hex> at offset <n>`},
	}
}
