package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// TestMapOutputsLandOnTheirOwnTasksOnAnAgedDatabase is issue 8's reproduction: after a few
// dozen runs and an ANALYZE, with index scans off, a map over six distinct elements must
// return each element in its own place (the misrouting bug returned the last one six times).
func TestMapOutputsLandOnTheirOwnTasksOnAnAgedDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := flows(t, `
flows:
  - slug: titles
    steps:
      - {slug: each, type: map, module: "{{echo_map}}"}
      - {slug: seen, type: map, depends_on: [each], module: "{{oracle}}"}
`)
	w := startWorker(t, db.Pool, f, worker.Config{})
	var warm []string
	for i := range 20 {
		warm = append(warm, startRun(t, db.Pool, "titles", fmt.Sprintf(`["w%d-a","w%d-b","w%d-c"]`, i, i, i)))
	}
	for _, id := range warm {
		waitRun(t, db.Pool, id, 60*time.Second)
	}
	w.Stop(t)
	for _, stmt := range []string{
		`analyze pgflow.step_tasks`, `analyze pgflow.runs`, `analyze pgflow.step_states`,
		`alter database ` + db.Name + ` set enable_indexscan = off`,
		`alter database ` + db.Name + ` set enable_bitmapscan = off`,
	} {
		if _, err := db.Pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	db.Pool.Reset() // new sessions pick up the database's settings
	startWorker(t, db.Pool, f, worker.Config{})
	var ids []string
	for range 5 {
		ids = append(ids, startRun(t, db.Pool, "titles", `["a","b","c","d","e","f"]`))
	}
	for _, id := range ids {
		r := waitRun(t, db.Pool, id, 60*time.Second)
		if r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
		var out struct {
			Seen []struct {
				Context struct {
					RunID     string `json:"run_id"`
					TaskIndex int    `json:"task_index"`
				} `json:"context"`
				Input string `json:"input"`
			} `json:"seen"`
		}
		if err := json.Unmarshal(r.Output, &out); err != nil {
			t.Fatal(err)
		}
		for i, s := range out.Seen {
			if want := string(rune('a' + i)); s.Input != want || s.Context.RunID != id || s.Context.TaskIndex != i {
				t.Errorf("run %s element %d: the handler of run %s task %d got %q, want its own %q", id, i, s.Context.RunID, s.Context.TaskIndex, s.Input, want)
			}
		}
		if len(out.Seen) != 6 {
			t.Errorf("run %s: %d outputs, want 6", id, len(out.Seen))
		}
	}
	r, err := db.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.OracleTasks != 6*5+3*20 || len(r.Problems()) > 0 {
		t.Errorf("audit: %d tasks checked by the oracle (want all %d), problems %v", r.OracleTasks, 6*5+3*20, r.Problems())
	}
}
