package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// echoFlowFolder writes a flows.yaml of one flow, slug, whose one step s runs a copy of the
// echo module beside it, in a folder of the test's own, and returns its path: a flows file a
// test may edit to reload.
func echoFlowFolder(t *testing.T, slug string) string {
	t.Helper()
	dir := t.TempDir()
	flowsPath := filepath.Join(dir, "flows.yaml")
	copyFile(t, workertest.Module(t, "modules/testdata/echo.wasm"), filepath.Join(dir, "handler.wasm"))
	if err := os.WriteFile(flowsPath, []byte("flows:\n  - slug: "+slug+"\n    steps:\n      - {slug: s, module: handler.wasm}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return flowsPath
}

// copyFile writes src's bytes to dst through a temporary name, as a build would replace it.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// A running worker picks up a rebuilt module within seconds while a stream of runs flows, with no
// task lost or run twice; a SIGHUP after adding a flow to flows.yaml serves the new flow; a
// module that does not load is refused and the running one goes on.
func TestServeReloadsChangedModulesAndFlows(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.wasm")
	copyFile(t, workertest.Module(t, "modules/testdata/oracle.wasm"), handler)
	flowsPath := filepath.Join(dir, "flows.yaml")
	one := "flows:\n  - slug: stream\n    steps:\n      - {slug: s, module: handler.wasm}\n"
	if err := os.WriteFile(flowsPath, []byte(one), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	reload := make(chan os.Signal, 1)
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	metrics := telemetry.NewMetrics(nil, func() int { return 0 })
	go func() {
		served <- worker.Serve(serveCtx, worker.ServeConfig{
			FlowsPath: flowsPath,
			Worker: workertest.Fast(worker.Config{Pool: db.Pool, Engine: engine(t, "wazero"), Metrics: metrics,
				Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}),
			Compile: func(ctx context.Context, file *flowfile.File) error {
				_, err := compile.Compile(ctx, db.Pool, file, compile.Options{})
				return err
			},
			WatchInterval: 100 * time.Millisecond,
			Reload:        reload,
		})
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	waitFor(t, 30*time.Second, func() (bool, string) {
		var n int
		_ = db.Pool.QueryRow(ctx, `select count(*) from pgflow.workers where queue_name = 'stream'`).Scan(&n)
		return n > 0, "the worker never registered:\n" + logs.String()
	})
	// A stream of runs, one every 20 ms, while the module is rebuilt.
	var ids []string
	streamUntil := func(cond func() bool, within time.Duration) {
		deadline := time.Now().Add(within)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within %s; log:\n%s", within, logs)
			}
			ids = append(ids, startRun(t, db.Pool, "stream", fmt.Sprintf(`{"i": %d}`, len(ids))))
			time.Sleep(20 * time.Millisecond)
		}
	}
	output := func(id string) string {
		var out string
		_ = db.Pool.QueryRow(ctx, `select coalesce(output::text, '') from pgflow.step_tasks where run_id = $1::uuid`, id).Scan(&out)
		return out
	}
	streamUntil(func() bool { return len(ids) > 10 && strings.Contains(output(ids[5]), `"context"`) }, 30*time.Second)

	// Rebuilt from source by the C compiler, writing the file in place as builds do: the echo
	// handler, which returns input.run.value, or the whole input.
	root := workertest.RepoRoot(t)
	build := exec.Command("clang", "--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-Wl,--strip-all",
		"-I", filepath.Join(root, "abi/c"), "-o", handler, filepath.Join(root, "modules/testdata/echo.c"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("rebuilding the handler: %v\n%s", err, out)
	}
	swapped := time.Now()
	var firstNew time.Time
	streamUntil(func() bool {
		last := ids[len(ids)-1]
		if out := output(last); out != "" && !strings.Contains(out, `"context"`) {
			var at time.Time
			_ = db.Pool.QueryRow(ctx, `select started_at from pgflow.step_tasks where run_id = $1::uuid`, last).Scan(&at)
			firstNew = at
			return true
		}
		return false
	}, 30*time.Second)
	// The runs started while the file was being swapped end too, each once.
	for _, id := range ids {
		if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
			t.Fatalf("run %s: %s (%s)", id, r.Status, r.Error)
		}
	}
	// The first task the rebuilt module ran, from the database once every run has ended (the
	// stream's own loop only bounds it from above).
	if err := db.Pool.QueryRow(ctx, `select min(started_at) from pgflow.step_tasks
		where flow_slug = 'stream' and output::text not like '%"context"%'`).Scan(&firstNew); err != nil {
		t.Fatal(err)
	}
	took := firstNew.Sub(swapped)
	t.Logf("the rebuilt module ran %s after the file changed", took)
	// Noticing takes a watch interval (100 ms here); loading compiles the module, which takes
	// a fraction of a second on a quiet machine and seconds on a loaded CI runner. A worker
	// that missed the change would run the old module until restarted: the 30 s above.
	if limit := 5 * time.Second; took > limit {
		t.Errorf("the rebuilt module ran first %s after the file changed, want within %s", took, limit)
	}
	var twice int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where flow_slug = 'stream' and attempts_count <> 1`).Scan(&twice); err != nil || twice != 0 {
		t.Errorf("%d tasks ran more than once (%v)", twice, err)
	}
	if !strings.Contains(logs.String(), "reload: module replaced") || !strings.Contains(logs.String(), "old_sha256=") {
		t.Errorf("the reload is not logged with the old and new sha256:\n%s", logs)
	}

	// A module that is not WebAssembly: refused, the worker serves on.
	if err := os.WriteFile(handler, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "reload refused") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "reload refused") {
		t.Fatalf("a broken module was not refused:\n%s", logs)
	}
	if r := waitRun(t, db.Pool, startRun(t, db.Pool, "stream", `{"value": "still served"}`), 30*time.Second); r.Status != "completed" {
		t.Fatalf("after a refused reload: %s (%s)", r.Status, r.Error)
	}
	if ok, refused := testutil.ToFloat64(metrics.ReloadOK), testutil.ToFloat64(metrics.Reloads.WithLabelValues("refused")); ok != 0 || refused < 1 {
		t.Errorf("after a refused reload: reload_last_successful %v, refused %v; want 0 and at least 1", ok, refused)
	}

	// SIGHUP with a flow added (and the module fixed).
	copyFile(t, workertest.Module(t, "modules/testdata/echo.wasm"), handler)
	two := one + "  - slug: added\n    steps:\n      - {slug: s, module: handler.wasm}\n"
	if err := os.WriteFile(flowsPath, []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- syscall.SIGHUP
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "reload: flow added") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	r := waitRun(t, db.Pool, startRun(t, db.Pool, "added", `{"value": 42}`), 30*time.Second)
	if r.Status != "completed" || string(r.Output) != `{"s": 42}` {
		t.Fatalf("the added flow: %s %s (%s)", r.Status, r.Output, r.Error)
	}
	if ok, applied := testutil.ToFloat64(metrics.ReloadOK), testutil.ToFloat64(metrics.Reloads.WithLabelValues("applied")); ok != 1 || applied < 2 {
		t.Errorf("after the module swap and SIGHUP: reload_last_successful %v, applied %v; want 1 and at least 2", ok, applied)
	}
}

// A reload (SIGHUP here; a changed file takes the same path) leaves the worker ready: the old
// worker's drain is not the process's, so /readyz answers 200 again within seconds and stays
// so while the new worker completes runs.
func TestAReloadKeepsTheWorkerReady(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	flowsPath := echoFlowFolder(t, "ready")
	health := &telemetry.Health{}
	srv, err := telemetry.Listen("127.0.0.1:0", nil, health)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + srv.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	logs := &syncBuffer{}
	reload := make(chan os.Signal, 1)
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(serveCtx, worker.ServeConfig{
			FlowsPath: flowsPath,
			Worker: workertest.Fast(worker.Config{Pool: db.Pool, Engine: engine(t, "wazero"), Health: health,
				Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}),
			WatchInterval: -1,
			Reload:        reload,
		})
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	waitFor(t, 30*time.Second, func() (bool, string) {
		code, body := readyz()
		return code == http.StatusOK, fmt.Sprintf("/readyz before the reload: %d %q; log:\n%s", code, body, logs)
	})
	reload <- syscall.SIGHUP
	waitFor(t, 30*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "worker stopped"), "the old worker never finished its drain; log:\n" + logs.String()
	})
	waitFor(t, 5*time.Second, func() (bool, string) {
		code, body := readyz()
		return code == http.StatusOK, fmt.Sprintf("/readyz after the reload: %d %q; log:\n%s", code, body, logs)
	})
	if r := waitRun(t, db.Pool, startRun(t, db.Pool, "ready", `{"value": 1}`), 30*time.Second); r.Status != "completed" {
		t.Fatalf("run after the reload: %s (%s)", r.Status, r.Error)
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Errorf("/readyz after a run on the reloaded worker: %d %q, want 200", code, body)
	}
	// Stopping the process does drain, and says so.
	stop()
	waitFor(t, 30*time.Second, func() (bool, string) {
		code, body := readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "draining"), fmt.Sprintf("/readyz while stopping: %d %q", code, body)
	})
}
