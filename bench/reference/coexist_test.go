package reference_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/host"
	"github.com/pgflow-wasm/pgflow-wasm/host/compile"
	"github.com/pgflow-wasm/pgflow-wasm/host/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// pgflow's TypeScript worker has no handler timeout and heartbeats only between batches, so a
// slow handler of its own keeps a task started long past the step timeout while it is alive.
// pgflow-wasm's stalled-task sweep, sharing the flow, must leave that task alone: taking it
// back would run it twice and, with max_attempts 1, fail the whole run.
func TestTheSweepLeavesALiveTypeScriptWorkersTasksAlone(t *testing.T) {
	t.Parallel()
	root := setup(t)
	db := pgtest.NewDB(t)
	ctx := context.Background()
	flows := filepath.Join(t.TempDir(), "flows.yaml")
	if err := os.WriteFile(flows, []byte(`
flows:
  - slug: shared
    max_attempts: 1
    timeout: 1
    steps:
      - {slug: s, module: `+filepath.Join(root, "modules/testdata/oracle.wasm")+`}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	file, err := flowfile.Load(flows)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sandbox.New("wazero", sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close(ctx)
	// pgflow-wasm compiles the flow; the TypeScript worker takes the first runs, each handler
	// taking 5 s: past the 1 s timeout plus the sweep's 1 s margin.
	worker, err := host.New(ctx, host.Config{Flows: file, Pool: db.Pool, Engine: engine, Concurrency: 4,
		StalledMargin: time.Second, RecoveryInterval: 200 * time.Millisecond, MinPollInterval: 20 * time.Millisecond,
		MaxPollInterval: 200 * time.Millisecond, Log: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := compile.Compile(ctx, db.Pool, file, compile.Options{}); err != nil {
		t.Fatal(err)
	}
	execSQL(t, db, `select pgflow.start_flow('shared', jsonb_build_object('i', i)) from generate_series(1, 4) i`)
	ts := startWorker(t, root, db.URL, "shared", "--handler-ms", "5000", "--vt", "30")
	deadline := time.Now().Add(time.Minute)
	for countWhere(t, db, `select count(*) from pgflow.step_tasks where status = 'started' and last_worker_id = $1`, ts.id) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("the TypeScript worker did not start the runs; stderr:\n%s", ts.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	serving, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(serving) }()
	defer func() {
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	// More runs, for pgflow-wasm, while the TypeScript handlers sleep on.
	execSQL(t, db, `select pgflow.start_flow('shared', jsonb_build_object('i', i)) from generate_series(5, 8) i`)
	waitRuns(t, db, ts, "shared", "completed", 8)
	if n := countWhere(t, db, `select count(*) from pgflow.step_tasks
		where flow_slug = 'shared' and status = 'completed' and attempts_count = 1 and last_worker_id = $1`, ts.id); n != 4 {
		t.Errorf("%d of the TypeScript worker's 4 tasks completed in its one attempt", n)
	}
	if n := countWhere(t, db, `select count(*) from pgflow.step_tasks
		where flow_slug = 'shared' and error_message like 'Task stalled%'`); n != 0 {
		t.Errorf("the sweep took back %d tasks of a live worker", n)
	}
}

// testLog sends worker logs to the test log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", p)
	return len(p), nil
}
