package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func init() {
	testModules["fib"] = "sandbox/testdata/build/fib.wasm"
	testModules["nul"] = "sandbox/testdata/build/nul_output.wasm"
	testModules["context"] = "sandbox/testdata/build/context.wasm"
}

func TestNotifyWakesAnIdleWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: chain
    steps:
      - {slug: a, module: "{{oracle}}"}
      - {slug: b, depends_on: [a], module: "{{oracle}}"}
      - {slug: c, depends_on: [b], module: "{{oracle}}"}
`)
	// Polling is effectively off: only notifications (and completions of this worker) wake it.
	w := startWorker(t, db.Pool, f, worker.Config{Signal: pgflowtype.SignalNotify, NotifyFallback: time.Hour,
		MinPollInterval: time.Hour, MaxPollInterval: time.Hour})
	// The run starts once the worker's first read found the queue empty: from then on only
	// a notification can wake it.
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(w.Metrics.Polls.WithLabelValues("chain", "empty"))
		return n > 0, "the worker has not read its empty queue yet"
	})
	began := time.Now()
	id := startRun(t, db.Pool, "chain", `{"value": 7}`)
	r := waitRun(t, db.Pool, id, 30*time.Second)
	if r.Status != "completed" {
		t.Fatalf("run: %s (%s)", r.Status, r.Error)
	}
	// With hour-long poll intervals only a notification can have started step a so soon.
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("an idle notify worker took %s to run a 3-step chain: notifications did not wake it", took)
	}
}

func TestConcurrencyLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		flowLimit   string // max_concurrency line, if any
		concurrency int
		want        int
	}{
		{"worker limit", "", 3, 3},
		{"flow limit", "    max_concurrency: 2\n", 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			f := flows(t, "flows:\n  - slug: busy\n"+tc.flowLimit+"    steps:\n      - {slug: w, module: \"{{oracle}}\"}\n")
			w := startWorker(t, db.Pool, f, worker.Config{Concurrency: tc.concurrency, BatchSize: 10})
			ctx := context.Background()
			if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('busy', '{"iterations": 200000000}') from generate_series(1, 12)`); err != nil {
				t.Fatal(err)
			}
			// Sample the handlers running now (the flow's in-flight gauge, one read, so exact);
			// the database's "started" count also holds tasks whose outcome is being written.
			inFlight := w.Metrics.InFlight.WithLabelValues("busy")
			most := 0
			deadline := time.Now().Add(120 * time.Second)
			for {
				most = max(most, int(testutil.ToFloat64(inFlight)))
				var done int
				if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where flow_slug = 'busy' and status = 'completed'`).Scan(&done); err != nil {
					t.Fatal(err)
				}
				if done == 12 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of 12 tasks done within 120 s", done)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if most > tc.want {
				t.Errorf("%d handlers ran at once; the limit is %d", most, tc.want)
			}
			if most < tc.want {
				t.Errorf("never more than %d handlers at once: the limit (%d) was never reached, the test proves little", most, tc.want)
			}
		})
	}
}

func TestOutputJsonbCannotStoreFailsOnlyItsRun(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: bad
    max_attempts: 1
    steps:
      - {slug: nul, module: "{{nul}}"}
  - slug: good
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{})
	bad := startRun(t, db.Pool, "bad", `{}`)
	good := startRun(t, db.Pool, "good", `{"value": "fine"}`)
	r := waitRun(t, db.Pool, bad, 30*time.Second)
	if r.Status != "failed" || !strings.Contains(r.Error, "invalid_output") || !strings.Contains(r.Error, `\u0000`) {
		t.Fatalf("run: %s %q, want failed with an invalid_output error naming \\u0000", r.Status, r.Error)
	}
	if r := waitRun(t, db.Pool, good, 30*time.Second); r.Status != "completed" {
		t.Errorf("the good run is %s: the bad output blocked it", r.Status)
	}
}

// The last resort: when calls the sandbox could not stop pile up, the worker stops to be
// restarted, handing every task it started back to pgflow first. No known module gets
// there (the sandbox stops every guest at its deadline), so this test uses wazero as it
// was before modules were instrumented (sandbox.Config.Uninstrumented), where loop-free
// recursion runs on past its deadline.
//
// Not parallel, garbage collector off: uninstrumented wazero code cannot be preempted, so
// a stop-the-world started by any goroutine would wait for the loop-free call to end.
func TestWorkerRestartsWhenAbandonedCallsPileUp(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: recursion
    max_attempts: 1
    steps:
      - {slug: fib, module: "{{fib}}", timeout: 1}
  - slug: cheap
    steps:
      - {slug: e, module: "{{oracle}}"}
`)
	eng, err := sandbox.New("wazero", sandbox.Config{Uninstrumented: true, WatchdogGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	// fib's handler recurses input-length deep without loops: {"run": "<34 x>"} is 45
	// bytes, fib(45) runs for several seconds, well past the timeout + grace.
	w := startWorker(t, db.Pool, f, worker.Config{Engine: eng, MaxAbandoned: 1})
	var cheap []string
	for range 5 {
		cheap = append(cheap, startRun(t, db.Pool, "cheap", `{"value": 1}`))
	}
	id := startRun(t, db.Pool, "recursion", `"`+strings.Repeat("x", 34)+`"`)
	for range 5 {
		cheap = append(cheap, startRun(t, db.Pool, "cheap", `{"value": 2}`))
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-w.Stopped():
		if !errors.Is(w.Err(), worker.ErrRestart) {
			t.Fatalf("Run returned %v, want ErrRestart", w.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not ask for a restart after an abandoned call")
	}
	r := waitRun(t, db.Pool, id, 10*time.Second)
	if r.Status != "failed" || !strings.Contains(r.Error, "Task timed out after 1s") {
		t.Errorf("run: %s %q, want failed with the timeout message", r.Status, r.Error)
	}
	// Run returned: every task the worker started has been completed or handed back.
	noTaskLeftStarted(t, db.Pool)
	// Let the abandoned call end (with the collector still off), so it cannot stall the
	// tests that follow.
	for deadline := time.Now().Add(2 * time.Minute); eng.Abandoned() > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
}

func TestHealthAndMetricsEndpoints(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: observed
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	health := &telemetry.Health{}
	eng := engine(t, "wazero")
	metrics := telemetry.NewMetrics(nil, eng.Abandoned)
	srv, err := telemetry.Listen("127.0.0.1:0", metrics, health)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before start = %d %q, want 503", code, body)
	}
	w := startWorker(t, db.Pool, f, worker.Config{Engine: eng, Metrics: metrics, Health: health})
	waitFor(t, 10*time.Second, func() (bool, string) {
		code, body := get("/readyz")
		return code == http.StatusOK, body
	})
	waitRun(t, db.Pool, startRun(t, db.Pool, "observed", `{"value": 1}`), 30*time.Second)
	// The counters move after the outcome's transaction commits, so a reader that saw the
	// run completed may be a moment ahead of them: wait for them rather than race.
	waitFor(t, 10*time.Second, func() (bool, string) {
		code, body := get("/metrics")
		for _, want := range []string{
			`pgflow_wasm_tasks_completed_total{flow="observed",step="e"} 1`,
			`pgflow_wasm_tasks_started_total{flow="observed",step="e"} 1`,
			`pgflow_wasm_task_duration_seconds_count{flow="observed",step="e"} 1`,
			`pgflow_wasm_polls_total{flow="observed",result="tasks"}`,
			`pgflow_wasm_queue_read_seconds_count{flow="observed"}`,
			`pgflow_wasm_tasks_in_flight{flow="observed"} 0`,
		} {
			if code != http.StatusOK || !strings.Contains(body, want) {
				return false, "/metrics lacks " + want
			}
		}
		return true, ""
	})
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d", code)
	}
	w.Worker.Stop() // begins the drain; Run has not returned yet
	waitFor(t, 10*time.Second, func() (bool, string) {
		code, body := get("/readyz")
		return code == http.StatusServiceUnavailable, body
	})
	if err := w.Stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestContextCarriesTheFlowInputUnlessItIsLarge(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: ctx
    steps:
      - {slug: each, type: map, module: "{{context}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{})
	contexts := func(input string) []map[string]any {
		t.Helper()
		r := waitRun(t, db.Pool, startRun(t, db.Pool, "ctx", input), 60*time.Second)
		if r.Status != "completed" {
			t.Fatalf("run: %s (%s)", r.Status, r.Error)
		}
		var out struct {
			Each []map[string]any `json:"each"`
		}
		if err := json.Unmarshal(r.Output, &out); err != nil {
			t.Fatal(err)
		}
		return out.Each
	}
	small := contexts(`["a", "b"]`)
	if len(small) != 2 || fmt.Sprint(small[1]["flow_input"]) != "[a b]" || small[1]["task_index"] != 1.0 || small[1]["attempt"] != 1.0 {
		t.Errorf("small input: contexts %v", small)
	}
	// 100 elements of 1 KB: a 100 KB input, over the 64 KiB the context carries.
	var elems []string
	for range 100 {
		elems = append(elems, `"`+strings.Repeat("x", 1000)+`"`)
	}
	big := contexts("[" + strings.Join(elems, ",") + "]")
	if len(big) != 100 || big[0]["flow_input"] != nil || big[0]["flow_input_omitted"] != true || big[0]["flow_input_bytes"].(float64) < 100000 {
		t.Errorf("large input: first context %v, want flow_input null, flow_input_omitted and its size", big[0])
	}
}
