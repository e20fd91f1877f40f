package pgflowwasm_test

import (
	"context"
	"testing"
	"time"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/runseed"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
)

// A client with PruneOlderThan prunes on its own while it serves: old finished runs go, the
// run it just served stays.
func TestAClientPrunesOldRunsWhileItServes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	file := workertest.FlowsFile(t, "flows:\n  - slug: pruned\n    steps: [{slug: a, module: \"{{echo}}\"}]\n",
		map[string]string{"echo": "modules/testdata/echo.wasm"})
	client, err := pgflowwasm.NewClient(db.Pool, pgflowwasm.Config{Flows: file,
		PruneOlderThan: 24 * time.Hour, PruneInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Stop(ctx)
	id, err := client.StartRun(ctx, "pruned", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	waiting, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := client.WaitRun(waiting, id); err != nil {
		t.Fatal(err)
	}
	if _, err := runseed.Seed(ctx, db.Pool, runseed.Options{Templates: []string{id}, Copies: 50, Age: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	var left int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where started_at < now() - interval '1 day'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
	}
	if left != 0 {
		t.Fatalf("%d old runs left after 30 s of pruning every 100 ms", left)
	}
	if r, err := client.GetRun(ctx, id); err != nil || r.Status != "completed" {
		t.Fatalf("the run just served: %+v, %v", r, err)
	}
}
