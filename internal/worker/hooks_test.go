package worker_test

import (
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// TaskWritten is told every committed task once, with its moments in the order a task passes
// them: woken, fetched (start_tasks sent between), handler started and ended, the outcome's
// write sent and committed. A chain's second step is started by the completion of the first
// ("claimed") or by a fetch.
func TestTaskWrittenGivesEachTasksMomentsInOrder(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: moments
    steps:
      - {slug: a, module: "{{echo}}"}
      - {slug: b, module: "{{echo}}", depends_on: [a]}
`)
	var mu sync.Mutex
	seen := map[string][]pgflowtype.TaskMoments{}
	hooks := pgflowtype.Hooks{TaskWritten: func(ti pgflowtype.TaskInfo, m pgflowtype.TaskMoments) {
		mu.Lock()
		seen[ti.RunID+"/"+ti.StepSlug] = append(seen[ti.RunID+"/"+ti.StepSlug], m)
		mu.Unlock()
	}}
	startWorker(t, db.Pool, f, worker.Config{Hooks: hooks})
	var runs []string
	for range 3 {
		runs = append(runs, startRun(t, db.Pool, "moments", `{"x": 1}`))
	}
	for _, id := range runs {
		if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s %s", id, r.Status, r.Error)
		}
	}
	// The last outcome's hook runs after its commit, which the run's completion shows: wait
	// for it rather than sleep.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 2*len(runs) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range runs {
		for _, step := range []string{"a", "b"} {
			ms := seen[id+"/"+step]
			if len(ms) != 1 {
				t.Fatalf("run %s step %s: TaskWritten called %d times, want 1", id, step, len(ms))
			}
			m := ms[0]
			if m.Cause != "wake" && m.Cause != "timer" && m.Cause != "claimed" {
				t.Errorf("%s/%s: cause %q", id, step, m.Cause)
			}
			order := []time.Time{m.Woke, m.FetchBegan, m.Fetched, m.HandlerStart, m.HandlerEnd, m.WriteBegan, m.Committed}
			for i, at := range order {
				if at.IsZero() {
					t.Errorf("%s/%s: moment %d not taken: %+v", id, step, i, m)
				}
				if i > 0 && at.Before(order[i-1]) {
					t.Errorf("%s/%s: moment %d before moment %d: %+v", id, step, i, i-1, m)
				}
			}
			if !m.ClaimSent.IsZero() && (m.ClaimSent.Before(m.FetchBegan) || m.ClaimSent.After(m.Fetched)) {
				t.Errorf("%s/%s: start_tasks sent outside its fetch: %+v", id, step, m)
			}
		}
	}
}
