package worker_test

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/procstat"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// The worker under pressure from guests that run into their deadlines (issue 11). These
// tests are not parallel: they measure the process (latency, resident memory).

func init() {
	testModules["hog"] = "sandbox/testdata/build/memory_hog.wasm"
}

// fibRunInput makes fib.wasm compute fib(n): the handler input {"run": "x..."} is n bytes.
func fibRunInput(n int) string { return `"` + strings.Repeat("x", n-10) + `"` }

// probe asks /livez every 100 ms until stop is closed and counts failures (1 s timeout).
func probe(addr string, stop <-chan struct{}) (ok, failed *atomic.Int64) {
	ok, failed = &atomic.Int64{}, &atomic.Int64{}
	client := &http.Client{Timeout: time.Second}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			resp, err := client.Get("http://" + addr + "/livez")
			if err == nil && resp.StatusCode == http.StatusOK {
				ok.Add(1)
			} else {
				failed.Add(1)
			}
			if err == nil {
				resp.Body.Close()
			}
		}
	}()
	return ok, failed
}

// runLatencies are the seconds from a run's start to its completion, for one flow's runs.
func runLatencies(t *testing.T, pool *pgxpool.Pool, flow string) []float64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `select extract(epoch from completed_at - started_at)::float8
		from pgflow.runs where flow_slug = $1 and status = 'completed'`, flow)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []float64
	for rows.Next() {
		var s float64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// noTaskLeftStarted fails when a task is still started: nobody would finish it but recovery.
func noTaskLeftStarted(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var n int
	// The aged template's warm flow keeps tasks started by a foreign worker on purpose.
	if err := pool.QueryRow(context.Background(), `select count(*) from pgflow.step_tasks
		where status = 'started' and flow_slug <> $1`, pgtest.WarmFlow).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d tasks are still started", n)
	}
}

// Eight loop-free guests (fib(48) runs for minutes) with a 2 s timeout, while cheap tasks of
// another flow keep coming: each runaway task fails at its timeout, the cheap runs complete
// with p99 under 1 s, /livez keeps answering, nothing is abandoned, the worker never restarts.
func TestRunawayGuestsDoNotStallTheWorker(t *testing.T) {
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: runaway
    max_attempts: 1
    steps:
      - {slug: fib, module: "{{fib}}", timeout: 2}
  - slug: cheap
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	eng := engine(t, "wazero")
	metrics, health := telemetry.NewMetrics(nil, eng.Abandoned), &telemetry.Health{}
	srv, err := telemetry.Listen("127.0.0.1:0", metrics, health)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	w := startWorker(t, db.Pool, f, worker.Config{Engine: eng, Metrics: metrics, Health: health})
	stop := make(chan struct{})
	ok, failed := probe(srv.Addr(), stop)

	var runaway []string
	for range 8 {
		runaway = append(runaway, startRun(t, db.Pool, "runaway", fibRunInput(48)))
	}
	var cheap []string
	for range 60 { // one every 50 ms for 3 s: across the runaway tasks' lifetime
		cheap = append(cheap, startRun(t, db.Pool, "cheap", `{"value": 1}`))
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range cheap {
		if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
			t.Errorf("cheap run %s: %s %s", id, r.Status, r.Error)
		}
	}
	for _, id := range runaway {
		r := waitRun(t, db.Pool, id, 30*time.Second)
		k := taskOf(t, db.Pool, id)
		if r.Status != "failed" || !strings.Contains(k.Error, "Task timed out after 2s") {
			t.Errorf("runaway run: %s, task %q", r.Status, k.Error)
		}
		// Timeout + the engine's stop (ms) + the watchdog's grace at worst, with room for a
		// loaded machine.
		if k.Ran > 2*time.Second+2*time.Second {
			t.Errorf("a runaway task ran %s with a 2 s timeout", k.Ran)
		}
	}
	close(stop)
	lat := runLatencies(t, db.Pool, "cheap")
	if len(lat) != len(cheap) {
		t.Fatalf("%d cheap runs completed, want %d", len(lat), len(cheap))
	}
	p99 := lat[len(lat)*99/100]
	t.Logf("cheap runs: median %.3f s, p99 %.3f s, max %.3f s; /livez: %d answered, %d failed",
		lat[len(lat)/2], p99, lat[len(lat)-1], ok.Load(), failed.Load())
	if p99 >= 1 {
		t.Errorf("cheap runs: p99 %.3f s while the runaway guests ran, want under 1 s", p99)
	}
	if failed.Load() != 0 || ok.Load() < 10 {
		t.Errorf("/livez: %d answered, %d failed", ok.Load(), failed.Load())
	}
	if n := eng.Abandoned(); n != 0 {
		t.Errorf("Abandoned() = %d, want 0", n)
	}
	select {
	case <-w.Stopped():
		t.Fatalf("the worker stopped (%v): it must not restart", w.Err())
	default:
	}
	noTaskLeftStarted(t, db.Pool)
}

// Sixteen guests that each fill 60 MiB and time out together, while cheap runs come and
// go: no call is abandoned, the worker does not restart, every task ends (none is left
// started), and resident memory is back within 64 MiB of where it was within seconds.
func TestLargeGuestsTimingOutTogether(t *testing.T) {
	const memoryBound = 64 << 20 // docs/sandbox.md, "Memory"
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: hogs
    max_attempts: 1
    steps:
      - {slug: hog, module: "{{hog}}", timeout: 2}
  - slug: cheap
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	eng := engine(t, "wazero")
	w := startWorker(t, db.Pool, f, worker.Config{Engine: eng, Concurrency: 32})
	waitRun(t, db.Pool, startRun(t, db.Pool, "cheap", `{"value": 0}`), 30*time.Second)
	before := selfRSS(t)
	var hogs, cheap []string
	for range 16 {
		hogs = append(hogs, startRun(t, db.Pool, "hogs", `{}`))
	}
	var wg sync.WaitGroup
	var peak atomic.Uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 30 {
			peak.Store(max(peak.Load(), selfRSS(t)))
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for range 20 {
		cheap = append(cheap, startRun(t, db.Pool, "cheap", `{"value": 1}`))
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range hogs {
		r := waitRun(t, db.Pool, id, 60*time.Second)
		if k := taskOf(t, db.Pool, id); r.Status != "failed" || !strings.Contains(k.Error, "Task timed out after 2s") {
			t.Errorf("hog run: %s, task %q", r.Status, k.Error)
		}
	}
	for _, id := range cheap {
		if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
			t.Errorf("cheap run %s: %s %s", id, r.Status, r.Error)
		}
	}
	wg.Wait()
	after := selfRSS(t)
	for deadline := time.Now().Add(5 * time.Second); after > before+memoryBound && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		after = selfRSS(t)
	}
	t.Logf("RSS before %d MiB, peak %d MiB, after %d MiB", before>>20, peak.Load()>>20, after>>20)
	if after > before+memoryBound {
		t.Errorf("RSS %d MiB after the guests ended, more than %d MiB over the %d MiB before", after>>20, memoryBound>>20, before>>20)
	}
	if n := eng.Abandoned(); n != 0 {
		t.Errorf("Abandoned() = %d, want 0", n)
	}
	select {
	case <-w.Stopped():
		t.Fatalf("the worker stopped (%v): it must not restart", w.Err())
	default:
	}
	noTaskLeftStarted(t, db.Pool)
}

// selfRSS is this test process's resident memory.
func selfRSS(t *testing.T) uint64 {
	t.Helper()
	n, err := procstat.RSS(os.Getpid())
	if err != nil {
		t.Skipf("resident memory unknown here: %v", err)
	}
	return uint64(n)
}
