package sandbox_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// Benchmarks of the two costs a worker pays: loading a module (cold compile, or from the
// on-disk cache after a restart) and running one task (fresh instance, or reused).
// Commands and results: docs/sandbox.md.

const greetInput = `{"run":{"name":"Ada"}}`

// BenchmarkLoad measures Load with a new engine per iteration (as after a process
// restart, so no in-memory code is reused): "cold" compiles into an empty cache,
// "cached" reads the code compiled by a first Load.
func BenchmarkLoad(b *testing.B) {
	for _, engine := range benchEngines() {
		name := engine.name
		if engine.cfg.Uninstrumented {
			name = "wazero-uninstrumented"
		}
		for _, lang := range exampleLangs {
			path := exampleModule(b, lang, "greet")
			b.Run(name+"/"+lang+"/cold", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					cfg := engine.cfg
					cfg.CacheDir = b.TempDir()
					e := mustNew(b, engine.name, cfg)
					b.StartTimer()
					loadAndClose(b, e, path)
					b.StopTimer()
					_ = e.Close(context.Background())
					b.StartTimer()
				}
			})
			b.Run(name+"/"+lang+"/cached", func(b *testing.B) {
				cfg := engine.cfg
				cfg.CacheDir = b.TempDir()
				warm := mustNew(b, engine.name, cfg)
				loadAndClose(b, warm, path)
				_ = warm.Close(context.Background())
				for b.Loop() {
					b.StopTimer()
					e := mustNew(b, engine.name, cfg)
					b.StartTimer()
					loadAndClose(b, e, path)
					b.StopTimer()
					_ = e.Close(context.Background())
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkRun measures one greet task, end to end through Run (instantiate, call,
// output checks, watchdog), with a fresh instance per task and with a reused one.
//
// "wazero-uninstrumented" is wazero as it was before modules were instrumented
// (Config.Uninstrumented): the instrumentation's cost is the difference.
func BenchmarkRun(b *testing.B) {
	for _, engine := range benchEngines() {
		e := mustNew(b, engine.name, engine.cfg)
		// "wat" is the echo test module: a handler that does almost nothing, so its time
		// is the sandbox's own cost per task.
		for _, lang := range append([]string{"wat"}, exampleLangs...) {
			for _, reuse := range []bool{false, true} {
				name := engine.name + "/" + lang + "/fresh"
				if reuse {
					name = engine.name + "/" + lang + "/reused"
				}
				if engine.cfg.Uninstrumented {
					name = "wazero-uninstrumented/" + lang + "/" + name[strings.LastIndex(name, "/")+1:]
				}
				b.Run(name, func(b *testing.B) {
					if lang == "tinygo" && reuse {
						b.Skip("the TinyGo examples are built with -gc=leaking for fresh instances: a reused one only grows")
					}
					path := testModule(b, "echo")
					if lang != "wat" {
						path = exampleModule(b, lang, "greet")
					}
					m, err := e.Load(context.Background(), path, sandbox.ModuleConfig{ReuseInstance: reuse})
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close(context.Background())
					t := task(greetInput, 10*time.Second)
					for b.Loop() {
						if _, err := m.Run(context.Background(), t); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		_ = e.Close(context.Background())
	}
}

type benchEngine struct {
	name string
	cfg  sandbox.Config
}

// benchEngines are the engines of this build, and wazero uninstrumented (for comparison).
func benchEngines() []benchEngine {
	out := []benchEngine{{sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()}},
		{sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir(), Uninstrumented: true}}}
	if len(sandbox.Engines()) > 1 {
		out = append(out, benchEngine{sandbox.EngineWasmtime, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()}})
	}
	return out
}

// BenchmarkCompute measures guest code that only computes: count_loop (a loop of 13
// instructions per iteration, 1,000,000 iterations), fib(27) (about 300,000 calls without
// a loop) and a fill and copy of 10 MiB (bulk). What the instrumentation costs a
// computing guest is the difference between wazero and wazero-uninstrumented.
func BenchmarkCompute(b *testing.B) {
	cases := []struct{ name, module, input string }{
		{"loop", "count_loop", `"` + strings.Repeat("n", 1_000_000-2) + `"`},
		{"recursion", "fib", fibInput(27)},
		{"bulk", "bulk", `""`},
	}
	for _, engine := range benchEngines() {
		e := mustNew(b, engine.name, engine.cfg)
		name := engine.name
		if engine.cfg.Uninstrumented {
			name = "wazero-uninstrumented"
		}
		for _, c := range cases {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				m, err := e.Load(context.Background(), testModule(b, c.module), sandbox.ModuleConfig{})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(context.Background())
				t := task(c.input, time.Minute)
				for b.Loop() {
					if _, err := m.Run(context.Background(), t); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		_ = e.Close(context.Background())
	}
}

func mustNew(b *testing.B, engine string, cfg sandbox.Config) sandbox.Engine {
	e, err := sandbox.New(engine, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func loadAndClose(b *testing.B, e sandbox.Engine, path string) {
	m, err := e.Load(context.Background(), path, sandbox.ModuleConfig{})
	if err != nil {
		b.Fatal(err)
	}
	_ = m.Close(context.Background())
}

// BenchmarkFetch measures one fetch task (a GET to a server on 127.0.0.1, its connection
// made and closed within the task, as for every task) against the same request made by
// plain Go with a new connection each time: the difference is what the sandbox and the
// policy add to a request.
func BenchmarkFetch(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hello, world")) }))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	b.Run("go-net-http", func(b *testing.B) {
		for b.Loop() {
			tr := &http.Transport{}
			resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			tr.CloseIdleConnections()
		}
	})
	pattern, err := httpcap.ParsePattern(host)
	if err != nil {
		b.Fatal(err)
	}
	caps := sandbox.Capabilities{Step: "bench", HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}}}
	for _, engine := range sandbox.Engines() {
		e := mustNew(b, engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
		for _, lang := range []string{"rust", "tinygo", "assemblyscript", "c"} {
			b.Run(engine+"/"+lang, func(b *testing.B) {
				m, err := e.Load(context.Background(), fetchModule(b, lang), sandbox.ModuleConfig{Capabilities: caps})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(context.Background())
				t := task(urlInput(srv.URL), 10*time.Second)
				for b.Loop() {
					if _, err := m.Run(context.Background(), t); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		_ = e.Close(context.Background())
	}
}
