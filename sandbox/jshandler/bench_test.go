package jshandler_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// What a TypeScript handler costs against C (docs/benchmarks-history.md, "TypeScript handlers"): one
// greet task through Run, and loading a step. The handlers are the greet examples,
// modules/examples/{c/greet.wasm,typescript/greet.ts}.

var greetCtx = []byte(`{"run_id":"0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b","flow_slug":"f","step_slug":"greet","task_index":0,"attempt":1,` +
	`"msg_id":7,"flow_input":{"name":"Ada"},"worker_id":"6f1c2a9e-8b1d-4c3e-9f00-1234567890ab","timeout_ms":10000,` +
	`"idempotency_key":"0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b:greet:0","pgflow_version":"0.8","step_type":"single","depends_on":[]}`)

func example(b testing.TB, rel string) string {
	b.Helper()
	p := filepath.Join("..", "..", "modules", "examples", rel)
	if _, err := os.Stat(p); err != nil {
		b.Fatalf("%s is missing: run `make examples`", p)
	}
	return p
}

// mapTaskCtx is the context of a task of a map over n lines of text, as the worker writes it.
func mapTaskCtx(n int) []byte {
	lines := []string{`"the quick brown fox"`, `"jumps over"`, `"the lazy dog"`, `"pgflow on any postgres"`, `"wasm"`}
	items := make([]string, n)
	for i := range items {
		items[i] = lines[i%len(lines)]
	}
	return []byte(`{"run_id":"0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b","flow_slug":"f","step_slug":"count","task_index":7,"attempt":1,` +
		`"msg_id":7,"flow_input":[` + strings.Join(items, ",") + `],"worker_id":"6f1c2a9e-8b1d-4c3e-9f00-1234567890ab","timeout_ms":10000,` +
		`"idempotency_key":"0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b:count:7","pgflow_version":"0.8","step_type":"map","depends_on":[]}`)
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRun is one greet task end to end through Run: C with a fresh instance, TypeScript
// with a fresh instance of its snapshot (what the worker does), TypeScript starting QuickJS
// and evaluating the bundle in every fresh instance (no snapshot: what the snapshot saves),
// and the snapshot's instance reused (reuse_instance: tasks then share state).
// cpu-us/op is the whole process's CPU per task.
func BenchmarkRun(b *testing.B) {
	for _, engine := range sandbox.Engines() {
		e, err := sandbox.New(engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name  string
			path  string
			fresh bool
			reuse bool
		}{
			{"c/fresh", "c/greet.wasm", false, false},
			{"c/reused", "c/greet.wasm", false, true},
			{"typescript/snapshot", "typescript/greet.ts", false, false},
			{"typescript/start-per-task", "typescript/greet.ts", true, false},
			{"typescript/snapshot-reused", "typescript/greet.ts", false, true},
			// A task of a map over a 2,000-line run input (the bench's map shape): the
			// context carries that input (about 33 KB), the task one line.
			{"c/map-task", "c/word_count.wasm", false, false},
			{"typescript/map-task", "typescript/word_count.ts", false, false},
		} {
			b.Run(engine+"/"+c.name, func(b *testing.B) {
				path := example(b, c.path)
				mc := sandbox.ModuleConfig{ReuseInstance: c.reuse}
				var m sandbox.Module
				if jshandler.IsSource(path) {
					m, err = jshandler.Load(context.Background(), e, path, mc, jshandler.Options{Fresh: c.fresh})
				} else {
					m, err = e.Load(context.Background(), path, mc)
				}
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(context.Background())
				t := sandbox.Task{Input: []byte(`{"run":{"name":"Ada"}}`), Context: greetCtx, Timeout: 10 * time.Second}
				want := `{"greeting":"Hello, Ada!"}`
				if strings.HasSuffix(c.name, "/map-task") {
					t.Input, t.Context, want = []byte(`"the quick brown fox"`), mapTaskCtx(2000), `{"text":"the quick brown fox","words":4}`
				}
				if res, err := m.Run(context.Background(), t); err != nil || string(res.Output) != want {
					b.Fatalf("%s, %v", res.Output, err)
				}
				runtime.GC()
				cpu0 := cpuTime()
				for b.Loop() {
					if _, err := m.Run(context.Background(), t); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
		_ = e.Close(context.Background())
	}
}

// BenchmarkRunConcurrent is a greet task at the worker's default concurrency: 32 at once,
// each in a fresh instance. peak-rss-MB is the process's high-water mark of resident memory
// (VmHWM, Linux only), which only ever rises: run one sub-benchmark per process, e.g.
// -bench 'RunConcurrent/wazero/typescript$' (docs/benchmarks.md).
func BenchmarkRunConcurrent(b *testing.B) {
	for _, lang := range []string{"c/greet.wasm", "typescript/greet.ts"} {
		b.Run("wazero/"+filepath.Dir(lang), func(b *testing.B) {
			e, err := sandbox.New("wazero", sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(context.Background())
			path := example(b, lang)
			var m sandbox.Module
			if jshandler.IsSource(path) {
				m, err = jshandler.Load(context.Background(), e, path, sandbox.ModuleConfig{}, jshandler.Options{})
			} else {
				m, err = e.Load(context.Background(), path, sandbox.ModuleConfig{})
			}
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			t := sandbox.Task{Input: []byte(`{"run":{"name":"Ada"}}`), Context: greetCtx, Timeout: 10 * time.Second}
			cpu0 := cpuTime()
			b.SetParallelism((32 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if res, err := m.Run(context.Background(), t); err != nil || string(res.Output) != `{"greeting":"Hello, Ada!"}` {
						b.Errorf("%s, %v", res.Output, err)
						return
					}
				}
			})
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			if kb := peakRSSKiB(); kb > 0 {
				b.ReportMetric(float64(kb)/1024, "peak-rss-MB")
			}
		})
	}
}

// peakRSSKiB is the process's VmHWM, 0 where /proc/self/status has none.
func peakRSSKiB() int {
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return 0
}

// BenchmarkLoad is loading a greet step with a new engine each time, as after a restart:
// "cold" with empty caches (TypeScript: bundle, make the snapshot, compile it), "cached"
// with the caches a first load filled (TypeScript: bundle, read the snapshot, read its code).
func BenchmarkLoad(b *testing.B) {
	for _, engine := range sandbox.Engines() {
		for _, lang := range []string{"c/greet.wasm", "typescript/greet.ts"} {
			path := example(b, lang)
			// Only the load is timed: not making or closing the engine.
			load := func(b *testing.B, sandboxCache, jsCache string) {
				b.StopTimer()
				runtime.GC() // as in a new process: no garbage of earlier loads to collect meanwhile
				e, err := sandbox.New(engine, sandbox.Config{CacheDir: sandboxCache})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				var m sandbox.Module
				if jshandler.IsSource(path) {
					m, err = jshandler.Load(context.Background(), e, path, sandbox.ModuleConfig{}, jshandler.Options{CacheDir: jsCache})
				} else {
					m, err = e.Load(context.Background(), path, sandbox.ModuleConfig{})
				}
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				_ = m.Close(context.Background())
				_ = e.Close(context.Background())
				b.StartTimer()
			}
			name := engine + "/" + filepath.Dir(lang)
			b.Run(name+"/cold", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					sc, jc := b.TempDir(), b.TempDir()
					jshandler.ForgetSnapshots()
					b.StartTimer()
					load(b, sc, jc)
				}
			})
			b.Run(name+"/cached", func(b *testing.B) {
				sc, jc := b.TempDir(), b.TempDir()
				load(b, sc, jc)
				for b.Loop() {
					b.StopTimer()
					jshandler.ForgetSnapshots()
					b.StartTimer()
					load(b, sc, jc)
				}
			})
		}
	}
}

// BenchmarkCompute is JavaScript doing work: fib(22) by plain recursion, about 57,000 calls.
// fuel/op calibrates a step's `fuel:` for JavaScript (docs/guests.md): the engine is an
// interpreter, and one of its opcodes costs many fuel units.
func BenchmarkCompute(b *testing.B) {
	for _, engine := range sandbox.Engines() {
		b.Run(engine, func(b *testing.B) {
			e, err := sandbox.New(engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(context.Background())
			m, err := jshandler.Load(context.Background(), e, filepath.Join("testdata", "fib.ts"), sandbox.ModuleConfig{Fuel: 1 << 50}, jshandler.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			t := sandbox.Task{Input: []byte(`{"n": 22}`), Context: greetCtx, Timeout: 60 * time.Second}
			var fuel int64
			for b.Loop() {
				res, err := m.Run(context.Background(), t)
				if err != nil || string(res.Output) != `{"fib":17711}` {
					b.Fatalf("%s, %v", res.Output, err)
				}
				fuel = res.FuelUsed
			}
			b.ReportMetric(float64(fuel), "fuel/op")
		})
	}
}
