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
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/uuidv4"
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
	worker := uuidv4.New()
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
