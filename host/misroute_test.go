package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/host"
	"github.com/pgflow-wasm/pgflow-wasm/internal/pgtest"
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
`)
	w := startWorker(t, db.Pool, f, host.Config{})
	var warm []string
	for i := range 20 {
		warm = append(warm, startRun(t, db.Pool, "titles", fmt.Sprintf(`["w%d-a","w%d-b","w%d-c"]`, i, i, i)))
	}
	for _, id := range warm {
		waitRun(t, db.Pool, id, 60*time.Second)
	}
	w.stop(t)
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
	startWorker(t, db.Pool, f, host.Config{})
	var ids []string
	for range 5 {
		ids = append(ids, startRun(t, db.Pool, "titles", `["a","b","c","d","e","f"]`))
	}
	for _, id := range ids {
		r := waitRun(t, db.Pool, id, 60*time.Second)
		if r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
		jsonEqual(t, r.Output, `{"each": ["a","b","c","d","e","f"]}`)
	}
}
