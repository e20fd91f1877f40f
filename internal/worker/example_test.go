package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/runs"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Serve a flow whose steps are written in three languages, start a run and wait for it.
// The run output holds the leaf steps' outputs.
func Example() {
	db, done := exampleDatabase() // any database where `pgflow-wasm db install` ran
	defer done()
	ctx := context.Background()

	root, _ := filepath.Abs("../..")
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	yaml := fmt.Sprintf(`
flows:
  - slug: words
    steps:
      - {slug: count, type: map, module: %[1]s/modules/examples/tinygo/word_count.wasm}
      - {slug: total, depends_on: [count], module: %[1]s/modules/examples/rust/sum.wasm}
      - {slug: check, depends_on: [total], module: %[1]s/modules/examples/c/sum.wasm}
`, root)
	_ = os.WriteFile(filepath.Join(dir, "flows.yaml"), []byte(yaml), 0o644)
	file, err := flowfile.Load(filepath.Join(dir, "flows.yaml"))
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := compile.Compile(ctx, db.Pool, file, compile.Options{}); err != nil {
		fmt.Println(err)
		return
	}
	engine, _ := sandbox.New("wazero", sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	defer engine.Close(ctx)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	worker, err := worker.New(ctx, worker.Config{Flows: file, Pool: db.Pool, Engine: engine, Signal: worker.SignalNotify, Log: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	serving, stop := context.WithCancel(ctx)
	defer stop()
	// Waiting for the run ends when the worker does (it may fail to start) or after a minute.
	waiting, giveUp := context.WithTimeout(ctx, time.Minute)
	defer giveUp()
	stopped := make(chan error, 1)
	go func() {
		err := worker.Run(serving)
		giveUp()
		stopped <- err
	}()

	// count (TinyGo) maps over the input; total (Rust) and check (C) add the numbers up.
	run, err := runs.StartAndWait(waiting, db.Pool, "words", json.RawMessage(`["one two", "three"]`), time.Second)
	if err != nil {
		stop()
		fmt.Println(err, <-stopped)
		return
	}
	fmt.Println(run.Status, string(run.Output))

	stop() // what SIGTERM does in `pgflow-wasm serve`: drain, then return
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// completed {"check": {"sum": 3}}
	// worker stopped: <nil>
}

// exampleDatabase borrows a fresh, migrated database from internal/pgtest for a runnable
// example, which has no *testing.T of its own.
func exampleDatabase() (*pgtest.DB, func()) {
	tb := &exampleTB{}
	db := pgtest.NewDB(tb)
	return db, tb.cleanup
}

// exampleTB is the part of testing.TB that pgtest uses; failures panic.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Name() string                   { return "Example" }
func (e *exampleTB) Failed() bool                   { return false }
func (e *exampleTB) Logf(string, ...any)            {}
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Skip(a ...any)                  { panic(fmt.Sprint(a...)) }
func (e *exampleTB) cleanup() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
