// Package dashtest holds what the dashboard's tests share: flows files that use the
// modules built from this repository, and a real worker serving them in the background.
package dashtest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/host"
	"github.com/pgflow-wasm/pgflow-wasm/host/compile"
	"github.com/pgflow-wasm/pgflow-wasm/host/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/runs"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// RepoRoot is the checkout the test runs in.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// FlowsFile writes yamlText to a flows file in a temporary folder and loads it. {{root}}
// in the text is the checkout's folder, so modules are named like
// {{root}}/modules/testdata/echo.wasm; each must have been built (`make modules`).
func FlowsFile(t testing.TB, yamlText string) *flowfile.File {
	t.Helper()
	root := RepoRoot(t)
	yamlText = strings.ReplaceAll(yamlText, "{{root}}", root)
	path := filepath.Join(t.TempDir(), "flows.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := flowfile.Load(path)
	if err != nil {
		t.Fatalf("flows file: %v (are the modules built? `make modules`)", err)
	}
	return f
}

// Compile creates the file's flows in the database.
func Compile(t testing.TB, pool *pgxpool.Pool, file *flowfile.File) {
	t.Helper()
	if _, err := compile.Compile(context.Background(), pool, file, compile.Options{}); err != nil {
		t.Fatalf("compile: %v", err)
	}
}

// Worker is a worker serving in the background of a test.
type Worker struct {
	*host.Worker
	cancel  context.CancelFunc
	stopped chan struct{}
	err     error
}

// Stop shuts the worker down and waits for it.
func (w *Worker) Stop(t testing.TB) {
	t.Helper()
	w.cancel()
	select {
	case <-w.stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop within 60 s")
	}
}

// Stopped is closed when the worker's Run returned.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// StartWorker compiles the file's flows and serves them until the test ends. cfg may set
// any option; Flows, Pool, Engine and Log are filled in.
func StartWorker(t testing.TB, pool *pgxpool.Pool, file *flowfile.File, cfg host.Config) *Worker {
	t.Helper()
	ctx := context.Background()
	Compile(t, pool, file)
	engine, err := sandbox.New("wazero", sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Flows, cfg.Pool, cfg.Engine = file, pool, engine
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.MinPollInterval == 0 {
		cfg.MinPollInterval, cfg.MaxPollInterval = 20*time.Millisecond, 200*time.Millisecond
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	w, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	rw := &Worker{Worker: w, cancel: cancel, stopped: make(chan struct{})}
	go func() { rw.err = w.Run(runCtx); close(rw.stopped) }()
	t.Cleanup(func() {
		rw.Stop(t)
		if rw.err != nil && !errors.Is(rw.err, host.ErrRestart) {
			t.Errorf("worker Run: %v", rw.err)
		}
		_ = engine.Close(context.Background())
	})
	return rw
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// StartRun starts a run and returns its id.
func StartRun(t testing.TB, pool *pgxpool.Pool, flow, input string) string {
	t.Helper()
	id, err := runs.Start(context.Background(), pool, flow, json.RawMessage(input))
	if err != nil {
		t.Fatalf("start %s: %v", flow, err)
	}
	return id
}

// WaitRun waits until the run ends and returns it.
func WaitRun(t testing.TB, pool *pgxpool.Pool, id string, within time.Duration) *runs.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	r, err := runs.Wait(ctx, pool, id, time.Second)
	if err != nil {
		tree, _ := runs.GetTree(context.Background(), pool, id)
		var b strings.Builder
		if tree != nil {
			tree.Render(&b, 20)
		}
		t.Fatalf("run %s did not end within %s: %v\n%s", id, within, err, b.String())
	}
	return r
}
