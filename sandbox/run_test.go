package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Guarantee 4: an infinite loop is stopped by the deadline on both engines, without
// abandoning the call.
func TestInfiniteLoopStopsAtTimeout(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		// A long grace: this test is about the engine stopping the loop, not the watchdog.
		e := newEngine(t, engine, sandbox.Config{WatchdogGrace: 5 * time.Second})
		m := load(t, e, testModule(t, "loop"), sandbox.ModuleConfig{})
		const timeout = 300 * time.Millisecond
		start := time.Now()
		_, err := m.Run(context.Background(), task(`{}`, timeout))
		elapsed := time.Since(start)
		wantKind(t, err, sandbox.KindTimeout, "timed out after 300ms")
		// The margin is generous for loaded CI machines and -race; the delay measured
		// on an idle machine is in docs/sandbox.md.
		if limit := timeout + time.Second; elapsed > limit {
			t.Errorf("the loop ran %s, more than %s", elapsed, limit)
		}
		if n := e.Abandoned(); n != 0 {
			t.Errorf("Abandoned() = %d, want 0: the engine itself must stop loops", n)
		}
		runEcho(t, e)
	})
}

// fibInput makes fib.wat compute fib(n): it uses the input length as n.
func fibInput(n int) string { return `"` + strings.Repeat("x", n-2) + `"` }

// A canceled context (not a deadline) gives KindCanceled, and the guest stops at once on
// both engines (wasmtime between two epoch slices of 20 ms): pgflow cancelling a task stops
// its handler.
func TestCanceled(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "loop"), sandbox.ModuleConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		var cancelledAt time.Time
		time.AfterFunc(50*time.Millisecond, func() { cancelledAt = time.Now(); cancel() })
		_, err := m.Run(ctx, task(`{}`, 20*time.Second))
		took := time.Since(cancelledAt)
		wantKind(t, err, sandbox.KindCanceled, "canceled")
		t.Logf("%s: the guest stopped %s after the cancellation", engine, took.Round(time.Microsecond))
		if took > time.Second {
			t.Errorf("the guest stopped %s after the cancellation, want within 100 ms (a second on a loaded machine)", took)
		}
		if n := e.Abandoned(); n != 0 {
			t.Errorf("Abandoned() = %d after a cancellation, want 0", n)
		}
		wantKind(t, err, sandbox.KindCanceled, "canceled")
	})
}

// Guarantee 7: a fresh instance per task unless the step opts in to reuse; a reused
// instance is discarded after a failure.
func TestInstanceIsolationAndReuse(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		counter := testModule(t, "counter")
		run := func(m sandbox.Module, input string) string {
			res, err := m.Run(context.Background(), task(input, 5*time.Second))
			if err != nil {
				return "error: " + string(err.(*sandbox.Error).Kind)
			}
			return string(res.Output)
		}
		fresh := load(t, e, counter, sandbox.ModuleConfig{})
		var got []string
		for range 3 {
			got = append(got, run(fresh, `{}`))
		}
		if want := "1 1 1"; strings.Join(got, " ") != want {
			t.Errorf("fresh instances answered %v, want %s", got, want)
		}
		reused := load(t, e, counter, sandbox.ModuleConfig{ReuseInstance: true})
		got = nil
		for _, in := range []string{`{}`, `{}`, `{}`, `"fail"`, `{}`, `{}`} {
			got = append(got, run(reused, in))
		}
		if want := "1 2 3 error: trap 1 2"; strings.Join(got, " ") != want {
			t.Errorf("a reused instance answered %v, want %s", got, want)
		}
	})
}

// A fresh instance sees its module's data as built and zero everywhere else, whichever
// module's task left the memory dirty before it (the sandbox reuses linear memories and
// leaves a module's data ranges to its next instance to write again).
func TestFreshMemoryHoldsOnlyItsData(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		withData := load(t, e, testModule(t, "data_dirty"), sandbox.ModuleConfig{})
		without := load(t, e, testModule(t, "zero_dirty"), sandbox.ModuleConfig{})
		for i, m := range []sandbox.Module{withData, withData, without, withData, without, without, withData} {
			res, err := m.Run(context.Background(), task(`{}`, 5*time.Second))
			if err != nil || string(res.Output) != `"ok"` {
				t.Fatalf("task %d: %q, %v: its memory held another task's bytes", i, res.Output, err)
			}
		}
	})
}

// Concurrent tasks on one module each get their own output.
func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		for _, reuse := range []bool{false, true} {
			m := load(t, e, testModule(t, "echo"), sandbox.ModuleConfig{ReuseInstance: reuse})
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for i := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := fmt.Sprintf(`{"task":%d,"pad":"%s"}`, i, strings.Repeat("y", i*100))
					res, err := m.Run(context.Background(), task(in, 10*time.Second))
					if err != nil || string(res.Output) != in {
						errs <- fmt.Errorf("task %d (reuse %v): %s, %v", i, reuse, res.Output, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		}
	})
}

// The host passes input and context byte for byte, and falsy outputs stay what they are.
func TestExactInputContextOutput(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		echo := load(t, e, testModule(t, "echo"), sandbox.ModuleConfig{})
		for _, in := range []string{`0`, `false`, `""`, `null`, `[]`, `{}`, `"Ünïcödé ✓ 🎉"`, ` {"spaced" : 1} `, strings.Repeat(`"`+strings.Repeat("z", 1000)+`"`, 1)} {
			res, err := echo.Run(context.Background(), task(in, 5*time.Second))
			if err != nil || string(res.Output) != in {
				t.Errorf("echo %q = %q, %v", in, res.Output, err)
			}
			if len(res.Logs) != 1 || res.Logs[0].Message != "echo called" || res.Logs[0].Level != 1 {
				t.Errorf("logs %+v, want one info line \"echo called\"", res.Logs)
			}
		}
		ctxMod := load(t, e, testModule(t, "context"), sandbox.ModuleConfig{})
		res, err := ctxMod.Run(context.Background(), task(`{}`, 5*time.Second))
		if err != nil || string(res.Output) != string(testContext) {
			t.Errorf("context = %s, %v; want %s", res.Output, err, testContext)
		}
		levels := load(t, e, testModule(t, "log_levels"), sandbox.ModuleConfig{})
		res, err = levels.Run(context.Background(), task(`{}`, 5*time.Second))
		if err != nil || string(res.Output) != "null" {
			t.Fatalf("log_levels = %s, %v; want null", res.Output, err)
		}
		var got []string
		for _, l := range res.Logs {
			got = append(got, fmt.Sprintf("%d:%s", l.Level, l.Message))
		}
		if want := "0:d 0:d 1:d 2:d 3:d 3:déjà vu \uFFFD"; strings.Join(got, " ") != want {
			t.Errorf("logs %q, want %q", strings.Join(got, " "), want)
		}
	})
}

// Guarantee 3: the memory limit is exact to the page; a guest that handles a refused
// grow itself just fails with its own error.
func TestMemoryLimitBoundary(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "grow_once"), sandbox.ModuleConfig{MemoryLimit: 4 << 20})
		// 1 page to start + 63 more = 64 pages = 4 MiB: allowed.
		res, err := m.Run(context.Background(), task(`"`+strings.Repeat("p", 61)+`"`, 5*time.Second))
		if err != nil || string(res.Output) != "true" {
			t.Errorf("growing to exactly the limit: %s, %v", res.Output, err)
		}
		// 64 more pages: one page over.
		_, err = m.Run(context.Background(), task(`"`+strings.Repeat("p", 62)+`"`, 5*time.Second))
		wantKind(t, err, sandbox.KindHandlerError, "grow refused")
		// A limit that is not a whole number of pages is rounded down.
		m2 := load(t, e, testModule(t, "grow_once"), sandbox.ModuleConfig{MemoryLimit: 4<<20 + 1000})
		_, err = m2.Run(context.Background(), task(`"`+strings.Repeat("p", 62)+`"`, 5*time.Second))
		wantKind(t, err, sandbox.KindHandlerError, "grow refused")
		// Below one page is a configuration error.
		if _, err := e.Load(context.Background(), testModule(t, "echo"), sandbox.ModuleConfig{MemoryLimit: 1000}); err == nil ||
			!strings.Contains(err.Error(), "below one 64 KiB page") {
			t.Errorf("a 1000-byte limit: %v", err)
		}
	})
}

// Command mode: stdin envelope, stdout output.
func TestCommandMode(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "command_echo"), sandbox.ModuleConfig{})
		if got := m.Info().Mode; got != sandbox.ModeCommand {
			t.Errorf("mode %q, want command", got)
		}
		res, err := m.Run(context.Background(), task(`{"a":[1,2]}`, 5*time.Second))
		want := `{"input":{"a":[1,2]},"context":` + string(testContext) + `}`
		if err != nil || string(res.Output) != want {
			t.Errorf("command_echo = %s, %v; want %s", res.Output, err, want)
		}
		c := load(t, e, testModule(t, "c_command"), sandbox.ModuleConfig{})
		res, err = c.Run(context.Background(), task(`{"a":1}`, 5*time.Second))
		if want := fmt.Sprintf(`{"stdin_bytes":%d}`, len(`{"input":{"a":1},"context":}`)+len(testContext)); err != nil || string(res.Output) != want {
			t.Errorf("c_command = %s, %v; want %s", res.Output, err, want)
		}
	})
}

// Guarantee 9: compiled code is cached on disk per module hash, and a damaged cache
// entry only costs a recompile.
func TestCompilationCache(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		dir := t.TempDir()
		path := testModule(t, "c_wasi_libc")
		for round := range 2 {
			e := newEngine(t, engine, sandbox.Config{CacheDir: dir})
			m := load(t, e, path, sandbox.ModuleConfig{})
			if _, err := m.Run(context.Background(), task(`{}`, 5*time.Second)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			_ = e.Close(context.Background())
		}
		var files []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		if len(files) == 0 {
			t.Fatalf("no compiled code in %s", dir)
		}
		for _, f := range files {
			if err := os.WriteFile(f, []byte("garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		e := newEngine(t, engine, sandbox.Config{CacheDir: dir})
		m := load(t, e, path, sandbox.ModuleConfig{})
		if _, err := m.Run(context.Background(), task(`{}`, 5*time.Second)); err != nil {
			t.Fatalf("after damaging the cache: %v", err)
		}
	})
}

func TestClosed(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e, err := sandbox.New(engine, sandbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Load(context.Background(), testModule(t, "echo"), sandbox.ModuleConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Run(context.Background(), task(`{}`, time.Second)); !errors.Is(err, sandbox.ErrClosed) {
			t.Errorf("Run after Close: %v, want ErrClosed", err)
		}
		if _, err := e.Load(context.Background(), testModule(t, "echo"), sandbox.ModuleConfig{}); !errors.Is(err, sandbox.ErrClosed) {
			t.Errorf("Load after Close: %v, want ErrClosed", err)
		}
	})
}

func TestUnknownEngine(t *testing.T) {
	t.Parallel()
	if _, err := sandbox.New("v8", sandbox.Config{}); err == nil || !strings.Contains(err.Error(), `unknown engine "v8"`) {
		t.Errorf("New(v8): %v", err)
	}
}
