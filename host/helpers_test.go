package host_test

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
	"github.com/pgflow-wasm/pgflow-wasm/host/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/runs"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// repoRoot finds the checkout, where the built modules live.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// module returns the absolute path of a built module, failing with the command that builds
// it when it is missing.
func module(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("module %s is not built: run `make examples testmodules`", rel)
	}
	return p
}

// flowsFile writes a flows file in a temporary folder; {{name}} placeholders are replaced by
// absolute module paths.
func flowsFile(t testing.TB, yamlText string, modules map[string]string) *flowfile.File {
	t.Helper()
	for name, rel := range modules {
		yamlText = strings.ReplaceAll(yamlText, "{{"+name+"}}", module(t, rel))
	}
	path := filepath.Join(t.TempDir(), "flows.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := flowfile.Load(path)
	if err != nil {
		t.Fatalf("flows file: %v", err)
	}
	return f
}

// engine returns a sandbox engine with the disk cache shared by every test.
func engine(t testing.TB, name string) sandbox.Engine {
	t.Helper()
	e, err := sandbox.New(name, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// fastConfig makes the worker react quickly, so tests spend their time on behaviour.
func fastConfig(cfg host.Config) host.Config {
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

// runningWorker is a worker serving in the background of a test.
type runningWorker struct {
	*host.Worker
	Metrics *telemetry.Metrics
	cancel  context.CancelFunc
	stopped chan struct{} // closed when Run returned
	err     error         // what Run returned, once stopped is closed
}

// stop shuts the worker down gracefully (if Run has not returned already) and returns what
// Run returned. It may be called any number of times.
func (w *runningWorker) stop(t testing.TB) error {
	t.Helper()
	w.cancel()
	select {
	case <-w.stopped:
		return w.err
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop within 60 s")
		return nil
	}
}

// startWorker compiles the flows and serves them until the test ends.
func startWorker(t testing.TB, pool *pgxpool.Pool, file *flowfile.File, cfg host.Config) *runningWorker {
	t.Helper()
	ctx := context.Background()
	if _, err := compile.Compile(ctx, pool, file, compile.Options{}); err != nil {
		t.Fatalf("compile: %v", err)
	}
	cfg = fastConfig(cfg)
	cfg.Flows, cfg.Pool = file, pool
	if cfg.Engine == nil {
		cfg.Engine = engine(t, "wazero")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = telemetry.NewMetrics(cfg.Engine.Abandoned)
	}
	w, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	rw := &runningWorker{Worker: w, Metrics: cfg.Metrics, cancel: cancel, stopped: make(chan struct{})}
	go func() { rw.err = w.Run(runCtx); close(rw.stopped) }()
	t.Cleanup(func() {
		if err := rw.stop(t); err != nil && !errors.Is(err, host.ErrRestart) {
			t.Errorf("worker Run: %v", err)
		}
	})
	return rw
}

// testWriter sends worker logs to the test log (shown for failing tests).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startRun starts a run and returns its id.
func startRun(t testing.TB, pool *pgxpool.Pool, flow, input string) string {
	t.Helper()
	id, err := runs.Start(context.Background(), pool, flow, json.RawMessage(input))
	if err != nil {
		t.Fatalf("start %s: %v", flow, err)
	}
	return id
}

// waitRun waits until the run ends and returns it.
func waitRun(t testing.TB, pool *pgxpool.Pool, id string, within time.Duration) *runs.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	r, err := runs.Wait(ctx, pool, id, time.Second)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			tree, _ := runs.GetTree(context.Background(), pool, id)
			var b strings.Builder
			if tree != nil {
				tree.Render(&b, 20)
			}
			t.Fatalf("run %s did not end within %s:\n%s", id, within, b.String())
		}
		t.Fatalf("waiting for run %s: %v", id, err)
	}
	return r
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
