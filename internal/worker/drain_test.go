package worker_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// A drained process takes no task of any of its flows and stays up; undrained, it takes the
// tasks that waited. The drain is asked by one worker row's id and holds for both flows.
func TestADrainedProcessTakesNothingUntilUndrained(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: first
    steps:
      - {slug: e, module: "{{echo}}"}
  - slug: second
    steps:
      - {slug: e, module: "{{echo}}"}
`)
	w := startWorker(t, db.Pool, f, worker.Config{HeartbeatInterval: 100 * time.Millisecond})
	ctx := context.Background()
	select {
	case <-w.Started(): // registered
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not start within 60 s")
	}
	res, err := procctl.Drain(ctx, db.Pool, w.WorkerIDs()["second"], "test")
	if err != nil || !res.Changed || res.ProcessID != w.ProcessID() {
		t.Fatalf("Drain by a worker row: %+v, %v; want process %s changed", res, err, w.ProcessID())
	}
	waitFor(t, 30*time.Second, func() (bool, string) { return w.Drained(), "the worker has not seen the drain" })
	runs := []string{startRun(t, db.Pool, "first", `{"value": 1}`), startRun(t, db.Pool, "second", `{"value": 2}`)}
	time.Sleep(time.Second)
	for _, id := range runs {
		if st := taskOf(t, db.Pool, id).Status; st != "queued" {
			t.Fatalf("run %s's task is %s while its worker process is drained, want queued", id, st)
		}
	}
	select {
	case <-w.Stopped():
		t.Fatalf("a drained worker stopped (%v); it should stay up", w.Err())
	default:
	}
	if res, err := procctl.Undrain(ctx, db.Pool, w.ProcessID(), "test"); err != nil || !res.Changed {
		t.Fatalf("Undrain: %+v, %v", res, err)
	}
	for _, id := range runs {
		if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
			t.Fatalf("run %s after the undrain: %s, want completed", id, r.Status)
		}
	}
	var actions []string
	rows, err := db.Pool.Query(ctx, `select action || ' ' || actor from pgflow_wasm.operator_actions
		where process_id = $1::uuid order by id`, w.ProcessID())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		actions = append(actions, a)
	}
	if len(actions) != 2 || actions[0] != "drain test" || actions[1] != "undrain test" {
		t.Fatalf("audit: %q, want drain then undrain by test", actions)
	}
}

// A reload starts a new worker with new pgflow.workers rows: they join the same process,
// and the process's drain holds for the new worker until it is undrained.
func TestADrainHoldsAcrossAReload(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	flowsPath := echoFlowFolder(t, "held")
	var mu sync.Mutex
	var serving []*worker.Worker
	current := func() (*worker.Worker, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(serving) == 0 {
			return nil, 0
		}
		return serving[len(serving)-1], len(serving)
	}
	reload := make(chan os.Signal, 1)
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(serveCtx, worker.ServeConfig{
			FlowsPath: flowsPath,
			Worker: workertest.Fast(worker.Config{Pool: db.Pool, Engine: engine(t, "wazero"), HeartbeatInterval: 100 * time.Millisecond,
				Log: slog.New(slog.NewTextHandler(workertest.TestWriter{T: t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}),
			WatchInterval: -1,
			Reload:        reload,
			OnServe: func(w *worker.Worker, _ *flowfile.File) {
				mu.Lock()
				serving = append(serving, w)
				mu.Unlock()
			},
		})
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	waitFor(t, 30*time.Second, func() (bool, string) { _, n := current(); return n == 1, "the first worker does not serve" })
	first, _ := current()
	if _, err := procctl.Drain(ctx, db.Pool, first.ProcessID(), "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() (bool, string) { return first.Drained(), "the first worker has not seen the drain" })
	reload <- syscall.SIGHUP
	waitFor(t, 30*time.Second, func() (bool, string) { _, n := current(); return n == 2, "the reloaded worker does not serve" })
	second, _ := current()
	if second.ProcessID() != first.ProcessID() || !second.Drained() {
		t.Fatalf("after the reload: process %s (drained %v), want %s, drained", second.ProcessID(), second.Drained(), first.ProcessID())
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow_wasm.process_workers where process_id = $1::uuid`, first.ProcessID()).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("the process has %d worker rows (%v), want the first worker's and the reloaded one's", rows, err)
	}
	id := startRun(t, db.Pool, "held", `{"value": 1}`)
	time.Sleep(time.Second)
	if st := taskOf(t, db.Pool, id).Status; st != "queued" {
		t.Fatalf("a task while the reloaded process is drained: %s, want queued", st)
	}
	if _, err := procctl.Undrain(ctx, db.Pool, first.ProcessID(), "test"); err != nil {
		t.Fatal(err)
	}
	if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
		t.Fatalf("the run after the undrain: %s", r.Status)
	}
}
