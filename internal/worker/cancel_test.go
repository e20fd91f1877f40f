package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// mapOfLongTasks is a map input: n elements whose oracle handler busy-loops for about 20 s
// (instrumented wazero runs about two iterations a nanosecond), and one that fails at once
// when failing is true.
func mapOfLongTasks(n int, failing bool) string {
	var el []string
	for range n {
		el = append(el, `{"iterations": 40000000000}`)
	}
	if failing {
		el = append(el, `{"iterations": -1}`) // oracle refuses it: the task fails
	}
	return "[" + strings.Join(el, ", ") + "]"
}

// When pgflow gives up on a run, the handlers of its other tasks stop at once instead of
// running to their timeout: here the run fails because one map element fails for good, in
// this worker (it stops its own handlers as it writes the failure) or in another (the watch
// notices within CancelCheckInterval).
func TestCancelledTasksStopTheirHandlers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fail makes the run fail and returns when it did.
		fail func(t *testing.T, db *pgtest.DB, run string) time.Time
		long int
	}{
		{name: "failed_here", long: 19, fail: func(t *testing.T, db *pgtest.DB, run string) time.Time {
			var at time.Time
			waitFor(t, 30*time.Second, func() (bool, string) {
				err := db.Pool.QueryRow(context.Background(), `select failed_at from pgflow.runs where run_id = $1 and status = 'failed'`, run).Scan(&at)
				return err == nil, "the run has not failed"
			})
			return at
		}},
		{name: "failed_elsewhere", long: 20, fail: func(t *testing.T, db *pgtest.DB, run string) time.Time {
			// Another worker's task failed for good: fail_task on one started task, as any
			// worker does, with attempts used up.
			var at time.Time
			if err := db.Pool.QueryRow(context.Background(), `
				select now() from pgflow.fail_task($1::uuid, 'each', 0, 'another worker: failed for good')`, run).Scan(&at); err != nil {
				t.Fatal(err)
			}
			return at
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			f := flows(t, `
flows:
  - slug: cancelling
    max_attempts: 1
    timeout: 60
    steps:
      - {slug: each, type: map, module: "{{oracle}}"}
`)
			w := startWorker(t, db.Pool, f, worker.Config{Concurrency: 32, CancelCheckInterval: 200 * time.Millisecond})
			run := startRun(t, db.Pool, "cancelling", mapOfLongTasks(tc.long, tc.name == "failed_here"))
			// Every long element runs before the run fails (here the failing element fails at
			// once: its run fails as the others start).
			waitFor(t, 30*time.Second, func() (bool, string) {
				if tc.name == "failed_here" {
					return true, ""
				}
				n := testutil.ToFloat64(w.Metrics.InFlight.WithLabelValues("cancelling"))
				return int(n) >= tc.long, fmt.Sprintf("%v of %d handlers run", n, tc.long)
			})
			failedAt := tc.fail(t, db, run)
			waitFor(t, 20*time.Second, func() (bool, string) {
				n := testutil.ToFloat64(w.Metrics.TasksCancelled.WithLabelValues("cancelling", "each"))
				return int(n) == tc.long, fmt.Sprintf("%v of %d handlers stopped as cancelled", n, tc.long)
			})
			stopped := time.Since(failedAt)
			t.Logf("%d handlers stopped %s after the run failed", tc.long, stopped.Round(time.Millisecond))
			if stopped > 5*time.Second {
				t.Errorf("handlers stopped %s after the run failed; they should stop within a second", stopped)
			}
			if n := testutil.ToFloat64(w.Metrics.InFlight.WithLabelValues("cancelling")); n != 0 {
				t.Errorf("%v handlers still run", n)
			}
			if r := waitRun(t, db.Pool, run, 10*time.Second); r.Status != "failed" {
				t.Errorf("run is %s, want failed", r.Status)
			}
			// pgflow 0.15.1+ cancels the other tasks; before, they stay started in the failed
			// run whatever a worker does (no late outcome of ours changes them).
			proto, err := schema.DetectPgflow(context.Background(), db.Pool)
			if err != nil {
				t.Fatal(err)
			}
			if proto.Lifecycle {
				var started int
				if err := db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.step_tasks where run_id = $1 and status = 'started'`,
					run).Scan(&started); err != nil || started != 0 {
					t.Errorf("%d tasks left started (%v)", started, err)
				}
			}
		})
	}
}

// A task the drain timeout of a shutdown cuts says so, and whether pgflow retries it: on its
// last attempt the run fails, and the message says that too (it once said pgflow retries it).
func TestATaskCutByTheDrainTimeoutSaysSo(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: cut
    max_attempts: 1
    timeout: 60
    steps:
      - {slug: s, module: "{{spin}}"}
`)
	w := startWorker(t, db.Pool, f, worker.Config{DrainTimeout: 500 * time.Millisecond})
	run := startRun(t, db.Pool, "cut", `{}`)
	waitFor(t, 30*time.Second, func() (bool, string) {
		return taskOf(t, db.Pool, run).Status == "started", "the task has not started"
	})
	if err := w.Stop(t); err != nil {
		t.Fatal(err)
	}
	task := taskOf(t, db.Pool, run)
	for _, want := range []string{"Stopped by a worker shutdown", "drain timeout (500ms)", "this was its last attempt (1 of 1)"} {
		if !strings.Contains(task.Error, want) {
			t.Errorf("stored message %q lacks %q", task.Error, want)
		}
	}
	if r := waitRun(t, db.Pool, run, 10*time.Second); r.Status != "failed" {
		t.Errorf("run %s, want failed (its only attempt was cut)", r.Status)
	}
}
