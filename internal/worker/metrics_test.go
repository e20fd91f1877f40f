package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// histogramCount is the number of observations of a histogram's series with these labels.
func histogramCount(t *testing.T, m *telemetry.Metrics, name string, labels map[string]string) uint64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.Metric {
			if hasLabels(s, labels) {
				return s.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range s.Label {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// TestRunMetricsCountEachRunOnceByFlow serves a two-step flow that completes and a flow whose
// task fails twice (one retry): each run is counted started once and completed or failed
// once, with its duration; the retry is counted; every first attempt's time in the queue is
// observed.
func TestRunMetricsCountEachRunOnceByFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: good
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: b, module: "{{echo}}", depends_on: [a]}
  - slug: bad
    max_attempts: 2
    base_delay: 0
    steps:
      - {slug: f, module: "{{fail}}"}
`)
	w := startWorker(t, db.Pool, f, worker.Config{})
	var ids []string
	for range 3 {
		ids = append(ids, startRun(t, db.Pool, "good", `{"n": 1}`))
	}
	for range 2 {
		ids = append(ids, startRun(t, db.Pool, "bad", `{}`))
	}
	for i, id := range ids {
		want := "completed"
		if i >= 3 {
			want = "failed"
		}
		if r := waitRun(t, db.Pool, id, 60*time.Second); r.Status != want {
			t.Fatalf("run %d: %s, want %s", i, r.Status, want)
		}
	}
	m := w.Metrics
	// The counts follow the writes' callbacks, a moment after the runs' rows say so.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.RunsFailed.WithLabelValues("bad")) < 2 || testutil.ToFloat64(m.RunsCompleted.WithLabelValues("good")) < 3 {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"runs started good", testutil.ToFloat64(m.RunsStarted.WithLabelValues("good")), 3},
		{"runs started bad", testutil.ToFloat64(m.RunsStarted.WithLabelValues("bad")), 2},
		{"runs completed good", testutil.ToFloat64(m.RunsCompleted.WithLabelValues("good")), 3},
		{"runs failed good", testutil.ToFloat64(m.RunsFailed.WithLabelValues("good")), 0},
		{"runs failed bad", testutil.ToFloat64(m.RunsFailed.WithLabelValues("bad")), 2},
		{"runs completed bad", testutil.ToFloat64(m.RunsCompleted.WithLabelValues("bad")), 0},
		{"tasks retried bad/f", testutil.ToFloat64(m.TasksRetried.WithLabelValues("bad", "f")), 2},
		{"run durations good", float64(histogramCount(t, m, "pgflow_wasm_run_duration_seconds", map[string]string{"flow": "good", "status": "completed"})), 3},
		{"run durations bad", float64(histogramCount(t, m, "pgflow_wasm_run_duration_seconds", map[string]string{"flow": "bad", "status": "failed"})), 2},
		// First attempts only: 3 runs x 2 steps, and the 2 failing tasks' first attempts.
		{"queue waits good", float64(histogramCount(t, m, "pgflow_wasm_task_queue_wait_seconds", map[string]string{"flow": "good"})), 6},
		{"queue waits bad", float64(histogramCount(t, m, "pgflow_wasm_task_queue_wait_seconds", map[string]string{"flow": "bad"})), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestTwoWorkersCountEachRunOnceBetweenThem serves one flow from two workers: each run is
// counted started once and completed once in the sum of their counters, however the tasks
// fell between them.
func TestTwoWorkersCountEachRunOnceBetweenThem(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: shared
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: each, type: map, depends_on: [a], module: "{{echo_map}}"}
`)
	// Both read the queue (no fetch lease), a few tasks at a time, so the tasks of a run
	// and the writes that end runs fall on both.
	cfg := worker.Config{FetchLeases: -1, BatchSize: 2, Concurrency: 4}
	a := startWorker(t, db.Pool, f, cfg)
	b := startWorker(t, db.Pool, f, cfg)
	const runs = 30
	var ids []string
	for i := range runs {
		ids = append(ids, startRun(t, db.Pool, "shared", fmt.Sprintf(`{"value": [%d, 2, 3]}`, i)))
	}
	for _, id := range ids {
		if r := waitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
	}
	sum := func(get func(m *telemetry.Metrics) float64) float64 { return get(a.Metrics) + get(b.Metrics) }
	completed := func(m *telemetry.Metrics) float64 {
		return testutil.ToFloat64(m.RunsCompleted.WithLabelValues("shared"))
	}
	for deadline := time.Now().Add(10 * time.Second); sum(completed) < runs && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	started := sum(func(m *telemetry.Metrics) float64 { return testutil.ToFloat64(m.RunsStarted.WithLabelValues("shared")) })
	if started != runs || sum(completed) != runs {
		t.Errorf("two workers counted %v runs started and %v completed, want %d each", started, sum(completed), runs)
	}
	if completed(a.Metrics) == 0 || completed(b.Metrics) == 0 {
		t.Logf("one worker ended every run (%v and %v): the sum was not put to the test", completed(a.Metrics), completed(b.Metrics))
	}
}
