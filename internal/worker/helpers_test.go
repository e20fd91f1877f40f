package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// The worker tests run real workers through internal/workertest; these are its names here.
var (
	repoRoot   = workertest.RepoRoot
	module     = workertest.Module
	flowsFile  = workertest.FlowsFile
	engine     = workertest.Engine
	fastConfig = workertest.Fast
	startRun   = workertest.StartRun
	waitRun    = workertest.WaitRun
)

// runningWorker is a worker serving in the background of a test.
type runningWorker = workertest.Worker

// syncBuffer is a log sink shared by a worker's goroutines.
type syncBuffer = workertest.SyncBuffer

// startWorker compiles the flows and serves them until the test ends.
func startWorker(t testing.TB, pool *pgxpool.Pool, file *flowfile.File, cfg worker.Config) *runningWorker {
	t.Helper()
	return workertest.StartWorker(t, pool, file, cfg)
}

// jsonEqual compares two JSON texts by value (jsonb reorders keys and spacing).
func jsonEqual(t testing.TB, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output %s is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	if !jsonDeepEqual(g, w) {
		t.Fatalf("output = %s, want %s", got, want)
	}
}

func jsonDeepEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// onlyTask is the single task of a one-step run, as pgflow stores it.
type onlyTask struct {
	Status   string
	Attempts int
	Error    string
	Output   string        // jsonb text; "" when null
	Ran      time.Duration // failed_at or completed_at minus started_at; 0 while running
}

func taskOf(t testing.TB, pool *pgxpool.Pool, run string) onlyTask {
	t.Helper()
	var k onlyTask
	var ran *time.Duration
	if err := pool.QueryRow(context.Background(), `select status, attempts_count, coalesce(error_message, ''),
		coalesce(output::text, ''), coalesce(completed_at, failed_at) - started_at
		from pgflow.step_tasks where run_id = $1::uuid`, run).Scan(&k.Status, &k.Attempts, &k.Error, &k.Output, &ran); err != nil {
		t.Fatalf("reading the task of run %s: %v", run, err)
	}
	if ran != nil {
		k.Ran = *ran
	}
	return k
}
