package main_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// metric reads one sample of a worker's /metrics (0 when absent).
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+-]+)$`).FindStringSubmatch(string(b))
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cancel stops a run's running handlers within a second and leaves nothing of it queued or
// started; rerun starts a new run with the same input, linked to the first; both are audited.
func TestCancelStopsARunAndRerunRepeatsIt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: long
    timeout: 60
    steps:
      - {slug: each, type: map, module: %[1]q}
      - {slug: after, depends_on: [each], module: %[1]q}
`, module(t, "modules/testdata/oracle.wasm")))
	addr := freeAddr(t)
	startServe(t, db.URL, flows, "--concurrency", "16", "--metrics-addr", addr)
	db.WaitServing(t, "long")
	// Eight elements of about 30 s of work each (instrumented wazero: ~2 iterations a ns).
	input := "[" + strings.TrimSuffix(strings.Repeat(`{"iterations": 60000000000}, `, 8), ", ") + "]"
	env := []string{"DATABASE_URL=" + db.URL}
	out, errOut, code := runBinary(t, env, "start", "long", "--input", input)
	if code != 0 {
		t.Fatalf("start: exit %d %s %s", code, out, errOut)
	}
	run := strings.TrimSpace(out)
	inFlight := `pgflow_wasm_tasks_in_flight{flow="long"}`
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, addr, inFlight) < 8 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := metric(t, addr, inFlight); n < 8 {
		t.Fatalf("%v of 8 handlers run before the cancel", n)
	}
	cancelled := time.Now()
	out, errOut, code = runBinary(t, env, "cancel", run, "--reason", "test", "--actor", "tester")
	if code != 0 || !strings.Contains(out, "8 tasks cancelled") {
		t.Fatalf("cancel: exit %d\n%s%s", code, out, errOut)
	}
	for metric(t, addr, inFlight) > 0 && time.Since(cancelled) < 10*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	stopped := time.Since(cancelled)
	t.Logf("8 handlers stopped %s after `cancel` returned", stopped.Round(time.Millisecond))
	if n := metric(t, addr, inFlight); n != 0 || stopped > 3*time.Second {
		t.Errorf("%v handlers still run %s after the cancel (want none within a second)", n, stopped)
	}
	var runStatus string
	var active int
	if err := db.Pool.QueryRow(ctx, `select r.status, (select count(*) from pgflow.step_tasks t where t.run_id = r.run_id and t.status in ('queued', 'started'))
		from pgflow.runs r where r.run_id = $1::uuid`, run).Scan(&runStatus, &active); err != nil || runStatus != "failed" || active != 0 {
		t.Errorf("after the cancel: run %s, %d tasks queued or started (%v); want failed and none", runStatus, active, err)
	}
	if _, errOut, code := runBinary(t, env, "cancel", run); code != 1 || !strings.Contains(errOut, "is failed: nothing to cancel") {
		t.Errorf("cancelling an ended run: exit %d %q, want 1 and why", code, errOut)
	}

	out, errOut, code = runBinary(t, env, "rerun", run, "--actor", "tester")
	if code != 0 {
		t.Fatalf("rerun: exit %d %s %s", code, out, errOut)
	}
	again := strings.TrimSpace(out)
	var sameInput bool
	var of, who string
	if err := db.Pool.QueryRow(ctx, `select (select input from pgflow.runs where run_id = $1::uuid) = (select input from pgflow.runs where run_id = $2::uuid),
		rr.rerun_of::text, rr.actor from pgflow_wasm.reruns rr where rr.run_id = $2::uuid`, run, again).Scan(&sameInput, &of, &who); err != nil ||
		!sameInput || of != run || who != "tester" {
		t.Errorf("rerun %s: same input %v, rerun of %s by %s (%v); want the same input, linked to %s", again, sameInput, of, who, err, run)
	}
	if out, _, code := runBinary(t, env, "run", again); code != 0 || !strings.Contains(out, "rerun of "+run+"\n") {
		t.Errorf("run %s does not name the run it repeats: exit %d\n%s", again, code, out)
	}
	if out, _, code := runBinary(t, env, "run", run); code != 0 || !strings.Contains(out, "reruns: "+again+"\n") {
		t.Errorf("run %s does not name its rerun: exit %d\n%s", run, code, out)
	}
	var actions string
	if err := db.Pool.QueryRow(ctx, `select string_agg(action || ' by ' || actor, ', ' order by id) from pgflow_wasm.operator_actions where run_id = $1::uuid`, run).
		Scan(&actions); err != nil || actions != "cancel by tester, rerun by tester" {
		t.Errorf("audit: %q (%v)", actions, err)
	}
	_, _, _ = runBinary(t, env, "cancel", again) // the rerun's long handlers need not run on
}

// `worker drain` by one of a serving process's worker rows stops the whole process taking
// tasks of both its flows, and it stays up; `worker undrain` by the process id lets the runs
// that waited complete. Both are audited; an unknown id is refused with exit 1.
func TestWorkerDrainAndUndrainAProcess(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: one
    steps:
      - {slug: s, module: %[1]q}
  - slug: two
    steps:
      - {slug: s, module: %[1]q}
`, module(t, "modules/testdata/echo.wasm")))
	startServe(t, db.URL, flows)
	db.WaitServing(t, "one")
	db.WaitServing(t, "two")
	env := []string{"DATABASE_URL=" + db.URL}
	var row, proc, host string
	if err := db.Pool.QueryRow(ctx, `select w.worker_id::text, p.process_id::text, p.host from pgflow.workers w
		join pgflow_wasm.process_workers pw using (worker_id) join pgflow_wasm.worker_processes p using (process_id)
		where w.queue_name = 'two'`).Scan(&row, &proc, &host); err != nil {
		t.Fatalf("the serving process is not registered: %v", err)
	}
	out, errOut, code := runBinary(t, env, "worker", "drain", row, "--actor", "tester")
	if code != 0 || out != "drained worker process "+proc+" on "+host+"\n" {
		t.Fatalf("worker drain: exit %d %q %s", code, out, errOut)
	}
	if out, _, code := runBinary(t, env, "worker", "drain", proc); code != 0 || !strings.Contains(out, "was already drained") {
		t.Errorf("draining again: exit %d %q", code, out)
	}
	time.Sleep(2 * time.Second) // serve's heartbeat interval in these tests is 500ms
	var runs []string
	for _, flow := range []string{"one", "two"} {
		out, errOut, code := runBinary(t, env, "start", flow, "--input", `{"value": 1}`)
		if code != 0 {
			t.Fatalf("start: exit %d %s %s", code, out, errOut)
		}
		runs = append(runs, strings.TrimSpace(out))
	}
	time.Sleep(time.Second)
	for _, run := range runs {
		var status string
		if err := db.Pool.QueryRow(ctx, `select status from pgflow.step_tasks where run_id = $1::uuid`, run).Scan(&status); err != nil || status != "queued" {
			t.Fatalf("run %s's task while drained: %s (%v), want queued", run, status, err)
		}
	}
	if out, errOut, code := runBinary(t, env, "worker", "undrain", proc, "--actor", "tester"); code != 0 || !strings.HasPrefix(out, "undrained worker process "+proc) {
		t.Fatalf("worker undrain: exit %d %q %s", code, out, errOut)
	}
	for _, run := range runs {
		deadline := time.Now().Add(30 * time.Second)
		var status string
		for status != "completed" && time.Now().Before(deadline) {
			_ = db.Pool.QueryRow(ctx, `select status from pgflow.runs where run_id = $1::uuid`, run).Scan(&status)
			time.Sleep(50 * time.Millisecond)
		}
		if status != "completed" {
			t.Fatalf("run %s after the undrain: %s, want completed", run, status)
		}
	}
	var actions string
	if err := db.Pool.QueryRow(ctx, `select string_agg(action || ' by ' || actor, ', ' order by id) from pgflow_wasm.operator_actions where process_id = $1::uuid`, proc).
		Scan(&actions); err != nil || actions != "drain by tester, undrain by tester" {
		t.Errorf("audit: %q (%v)", actions, err)
	}
	if _, errOut, code := runBinary(t, env, "worker", "drain", "7c9e6679-7425-40de-944b-e07fc1f90ae7"); code != 1 || !strings.Contains(errOut, "neither a worker process nor a worker row") {
		t.Errorf("draining an unknown id: exit %d %q, want 1 and why", code, errOut)
	}
}
