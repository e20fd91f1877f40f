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

// ManyFailFlows is a map whose elements fail when they say so: work busy-loops
// input.run.iterations times, and fails on a negative count.
const ManyFailFlows = `
flows:
  - slug: many_fail
    max_attempts: 1
    steps:
      - {slug: each, type: map, module: {{root}}/modules/testdata/work.wasm}
`

// StartManyFail runs a map of n elements of which those at the failing indices fail, and
// returns the run once they all failed. The worker starts every element in one batch,
// before any fails: a task of a run that failed meanwhile would never start.
func StartManyFail(t testing.TB, db *pgtest.DB, n int, failing []int) string {
	t.Helper()
	elements := make([]string, n)
	for i := range elements {
		elements[i] = `{"run": {"iterations": 0}}`
	}
	for _, i := range failing {
		elements[i] = `{"run": {"iterations": -1}}`
	}
	id := workertest.StartRun(t, db.Pool, "many_fail", "["+strings.Join(elements, ",")+"]")
	if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "failed" {
		t.Fatalf("run %s: %s, want failed", id, r.Status)
	}
	// The run fails with its first failed element; the others' failures are written after it.
	var got []int
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < len(failing) && time.Now().Before(deadline) {
		if err := db.Pool.QueryRow(context.Background(), `select coalesce(array_agg(task_index order by task_index), '{}')
			from pgflow.step_tasks where run_id = $1::uuid and status = 'failed'`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if fmt.Sprint(got) != fmt.Sprint(failing) {
		t.Fatalf("the elements that failed are %v, want %v (did the worker start every element before the first failed?)", got, failing)
	}
	return id
}
