package sandbox_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// BenchmarkTimeoutOverrun measures how long after its deadline Run returns a timeout:
// "loop" is an infinite loop, "recursion" is loop-free fib(38). Every engine stops both,
// except wazero-uninstrumented (as before the instrumentation), where the watchdog gives
// up on the recursion after WatchdogGrace and the abandoned call runs on: abandoned-ms is
// how long it kept running after Run returned.
func BenchmarkTimeoutOverrun(b *testing.B) {
	const timeout = 20 * time.Millisecond
	for _, engine := range benchEngines() {
		for _, c := range []struct{ name, module, input string }{
			{"loop", "loop", `{}`},
			{"recursion", "fib", fibInput(38)},
		} {
			name := engine.name
			if engine.cfg.Uninstrumented {
				name = "wazero-uninstrumented"
			}
			b.Run(name+"/"+c.name, func(b *testing.B) {
				e := mustNew(b, engine.name, engine.cfg)
				defer e.Close(context.Background())
				m, err := e.Load(context.Background(), testModule(b, c.module), sandbox.ModuleConfig{})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(context.Background())
				var overrun, abandoned time.Duration
				for b.Loop() {
					start := time.Now()
					_, err := m.Run(context.Background(), task(c.input, timeout))
					returned := time.Since(start)
					if se, ok := err.(*sandbox.Error); !ok || se.Kind != sandbox.KindTimeout {
						b.Fatalf("want a timeout, got %v", err)
					}
					overrun += returned - timeout
					b.StopTimer()
					for e.Abandoned() != 0 {
						time.Sleep(time.Millisecond)
					}
					abandoned += time.Since(start) - returned
					b.StartTimer()
				}
				n := float64(b.N)
				b.ReportMetric(float64(overrun.Microseconds())/n/1000, "overrun-ms/op")
				b.ReportMetric(float64(abandoned.Microseconds())/n/1000, "abandoned-ms/op")
			})
		}
	}
}

// BenchmarkGCStall measures how long a garbage collection takes while another goroutine
// runs loop-free guest code (fib(38)), and the longest stop-the-world pause among the
// collections of the benchmark (max-stw-ms). Uninstrumented wazero code cannot be
// preempted, so the collection's stop-the-world waited for the guest call to end; with the
// instrumentation the guest returns to Go at every tick; wasmtime's calls are cgo calls,
// which do not hold up the collector.
func BenchmarkGCStall(b *testing.B) {
	for _, engine := range benchEngines() {
		name := engine.name
		if engine.cfg.Uninstrumented {
			name = "wazero-uninstrumented"
		}
		b.Run(name, func(b *testing.B) {
			e := mustNew(b, engine.name, engine.cfg)
			defer e.Close(context.Background())
			m, err := e.Load(context.Background(), testModule(b, "fib"), sandbox.ModuleConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			var gc, call time.Duration
			for b.Loop() {
				done := make(chan time.Duration)
				go func() {
					start := time.Now()
					_, _ = m.Run(context.Background(), task(fibInput(38), time.Minute))
					done <- time.Since(start)
				}()
				time.Sleep(20 * time.Millisecond) // let the guest start
				start := time.Now()
				runtime.GC()
				gc += time.Since(start)
				call += <-done
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			var worst uint64
			for i := before.NumGC; i < after.NumGC && after.NumGC-i <= 256; i++ {
				worst = max(worst, after.PauseNs[(i+255)%256])
			}
			n := float64(b.N)
			b.ReportMetric(float64(gc.Microseconds())/n/1000, "gc-ms/op")
			b.ReportMetric(float64(call.Microseconds())/n/1000, "guest-call-ms/op")
			b.ReportMetric(float64(worst)/1e6, "max-stw-ms")
		})
	}
}
