// Package workertest runs real pgflow-wasm workers in tests: flows files naming the modules
// built from this repository, a worker serving them in the background with settings that
// react quickly, and runs started and waited for. The host, dashboard and benchmark tests
// share it.
package workertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
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

// Module returns the absolute path of a built module (rel to the checkout), failing with
// the command that builds it when it is missing.
func Module(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("module %s is not built: run `make modules`", rel)
	}
	return p
}

// FlowsFile writes yamlText to a flows file in a temporary folder and loads it. In the text,
// {{root}} is the checkout's folder and {{name}} the absolute path of modules[name] (a path
// relative to the checkout, checked with Module).
func FlowsFile(t testing.TB, yamlText string, modules map[string]string) *flowfile.File {
	t.Helper()
	yamlText = strings.ReplaceAll(yamlText, "{{root}}", RepoRoot(t))
	for name, rel := range modules {
		yamlText = strings.ReplaceAll(yamlText, "{{"+name+"}}", Module(t, rel))
	}
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

// Engine returns a sandbox engine with the disk cache shared by every test, closed when the
// test ends.
func Engine(t testing.TB, name string) sandbox.Engine {
	t.Helper()
	e, err := sandbox.New(name, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// Fast makes a worker react quickly, so tests spend their time on behaviour: settings left
// at zero get short polls, heartbeats, sweeps and drains.
func Fast(cfg worker.Config) worker.Config {
	if cfg.MinPollInterval == 0 {
		cfg.MinPollInterval = 20 * time.Millisecond
	}
	if cfg.MaxPollInterval == 0 {
		cfg.MaxPollInterval = 200 * time.Millisecond
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	if cfg.RecoveryInterval == 0 {
		cfg.RecoveryInterval = time.Second
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	return cfg
}

// Worker is a worker serving in the background of a test.
type Worker struct {
	*worker.Worker
	Metrics *telemetry.Metrics
}

// Stop shuts the worker down gracefully (unless it ended already) and returns why it ended.
// It may be called any number of times.
func (w *Worker) Stop(t testing.TB) error {
	t.Helper()
	w.Drain()
	select {
	case <-w.Stopped():
		return w.Err()
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop within 60 s")
		return nil
	}
}

// StartWorker compiles the file's flows and serves them until the test ends, with Fast
// settings. cfg may set any option; Flows and Pool are filled in, and Engine (wazero), Log
// (warnings and errors to the test log) and Metrics when unset.
func StartWorker(t testing.TB, pool *pgxpool.Pool, file *flowfile.File, cfg worker.Config) *Worker {
	t.Helper()
	ctx := context.Background()
	Compile(t, pool, file)
	cfg = Fast(cfg)
	cfg.Flows, cfg.Pool = file, pool
	if cfg.Engine == nil {
		cfg.Engine = Engine(t, "wazero")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(TestWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = telemetry.NewMetrics(nil, cfg.Engine.Abandoned)
	}
	w, err := worker.New(ctx, cfg)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	rw := &Worker{Worker: w, Metrics: cfg.Metrics}
	go func() { _ = w.Start(ctx) }() // tests wait on Started, or on Stopped for a refused start
	t.Cleanup(func() {
		if err := rw.Stop(t); err != nil && !errors.Is(err, worker.ErrRestart) {
			t.Errorf("worker Run: %v", err)
		}
	})
	return rw
}

// TestWriter sends what is written to the test log (shown for failing tests).
type TestWriter struct{ T testing.TB }

func (w TestWriter) Write(p []byte) (int, error) {
	w.T.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// SyncBuffer is a log sink shared by a worker's goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartRun starts a run and returns its id.
func StartRun(t testing.TB, pool *pgxpool.Pool, flow, input string) string {
	t.Helper()
	id, err := store.Start(context.Background(), pool, flow, json.RawMessage(input))
	if err != nil {
		t.Fatalf("start %s: %v", flow, err)
	}
	return id
}

// WaitRun waits until the run ends and returns it; on a timeout the test fails with the run
// drawn as a tree.
func WaitRun(t testing.TB, pool *pgxpool.Pool, id string, within time.Duration) *pgflowtype.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	st := Store(t, pool)
	r, err := st.Wait(ctx, id, time.Second)
	if err != nil {
		tree, _ := st.GetTree(context.Background(), id)
		var b strings.Builder
		if tree != nil {
			tree.Render(&b, 20)
		}
		t.Fatalf("run %s did not end within %s: %v\n%s", id, within, err, b.String())
	}
	return r
}

// Store opens the read model over the test's database.
func Store(t testing.TB, pool *pgxpool.Pool) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), pool)
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	return s
}
