package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/bench"
	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/testbin"
)

// TestMain removes the binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// TestQuickBenchMeasuresEveryShape runs the harness end to end with tiny counts: the floor
// and pgflow-wasm on all three shapes, on the test server as it is configured. It checks
// the harness works, not how fast anything is.
func TestQuickBenchMeasuresEveryShape(t *testing.T) {
	t.Parallel()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	// Any database of the test server gives its URL; the harness makes its own databases.
	u, err := url.Parse(pgtest.NewDB(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postgres"
	var log bytes.Buffer
	rep, err := bench.Run(context.Background(), bench.Config{
		DatabaseURL: u.String(), Binary: bin, FloorBinary: benchBin(t), RepoRoot: root, CacheDir: t.TempDir(),
		OneStepRuns: 60, MapSize: 40, ChainRuns: 6, ChainLength: 3, LatencyRuns: 6, LatencyInFlight: 2,
		FloorLoops: 2, Fsync: []string{"asis"},
		Contenders: []bench.Contender{{Name: "floor", Kind: bench.KindFloor},
			{Name: "wazero/c/notify", Kind: bench.KindWorker, Lang: "c", Engine: "wazero", Signal: "notify"}},
		Log: &log,
	})
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, log.String())
	}
	if len(rep.Results) != 6 {
		t.Fatalf("got %d results, want 2 contenders x 3 shapes", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Err != "" {
			t.Errorf("%s on %s: %s", r.Contender, r.Shape, r.Err)
			continue
		}
		// CPU is counted in 10 ms ticks: too coarse for these few tasks to assert on.
		if r.TasksPerSec <= 0 || r.Latency.N == 0 || r.PeakRSS <= 0 {
			t.Errorf("%s on %s: incomplete figures %+v", r.Contender, r.Shape, r)
		}
		if r.Shape == bench.ShapeChain && r.Hop.P50 <= 0 {
			t.Errorf("%s: a hop's p50 of %.3f ms: a successor cannot start before its predecessor's completion commits", r.Contender, r.Hop.P50)
		}
		if r.Shape == bench.ShapeChain && r.Hop.N != 6*2 {
			t.Errorf("%s: %d hops measured, want 6 runs x 2 hops", r.Contender, r.Hop.N)
		}
		if r.Shape == bench.ShapeChain && r.Kind == bench.KindWorker && !hasLeg(r.HopParts, bench.LegHandlerToRun, 6*2) {
			t.Errorf("%s: the worker's task trace gave no %q for every hop: %+v", r.Contender, bench.LegHandlerToRun, r.HopParts)
		}
		if r.Kind != bench.KindFloor && r.RatioToFloor <= 0 {
			t.Errorf("%s on %s: no ratio to the floor", r.Contender, r.Shape)
		}
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, want := range []string{"### fsync asis: one-step runs (60", "| wazero/c/notify", "hop p50 ms"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
	if testing.Verbose() {
		fmt.Fprintln(os.Stderr, text.String())
	}
}

func hasLeg(parts []bench.HopPart, name string, n int) bool {
	for _, p := range parts {
		if p.Name == name {
			return p.N == n
		}
	}
	return false
}

// The workers shape runs N worker processes on one database and says what they did.
func TestWorkersShapeRunsSeveralWorkersOnOneDatabase(t *testing.T) {
	t.Parallel()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(pgtest.NewDB(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postgres"
	var log bytes.Buffer
	rep, err := bench.Run(context.Background(), bench.Config{
		DatabaseURL: u.String(), Binary: bin, FloorBinary: benchBin(t), RepoRoot: root, CacheDir: t.TempDir(),
		OneStepRuns: 30, ChainRuns: 4, ChainLength: 3, ChainInFlight: 2, Fsync: []string{"asis"},
		Shapes: []string{bench.ShapeWorkers}, WorkerCounts: []int{1, 2},
		Contenders: []bench.Contender{{Name: "floor", Kind: bench.KindFloor},
			{Name: "wazero/c/notify", Kind: bench.KindWorker, Lang: "c", Engine: "wazero", Signal: "notify"}},
		Log: &log,
	})
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, log.String())
	}
	if len(rep.Results) != 2 {
		t.Fatalf("got %d results, want one per worker count (the floor takes no part)", len(rep.Results))
	}
	for i, r := range rep.Results {
		if r.Err != "" {
			t.Errorf("%s: %s", r.Contender, r.Err)
			continue
		}
		if r.Workers == nil || r.Workers.Workers != i+1 || r.TasksPerSec <= 0 || r.Latency.N != 4 || r.Workers.Connections < i+1 {
			t.Errorf("%s: incomplete figures %+v %+v", r.Contender, r, r.Workers)
		}
		if !hasLeg(r.HopParts, bench.LegHandlerToRun, 4*2) {
			t.Errorf("%s: the workers' task traces gave no %q for every hop: %+v", r.Contender, bench.LegHandlerToRun, r.HopParts)
		}
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "| wazero/c/notify x2") {
		t.Errorf("report lacks the two workers' row:\n%s", text.String())
	}
}

// A benchmark leaves no PostgreSQL behind unannounced: it stops the private cluster it
// started, and leaves one that was already running, saying how to stop it.
func TestBenchStopsTheClusterItStarted(t *testing.T) {
	t.Parallel()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir(): its parents are closed to the postgres user when we run as root.
	dir, err := os.MkdirTemp("", "pgflow-wasm-bench-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	cluster, err := localpg.New(localpg.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Remove(context.Background()) })
	run := func() string {
		t.Helper()
		var log bytes.Buffer
		_, err := bench.Run(context.Background(), bench.Config{
			ClusterDir: dir, Binary: bin, FloorBinary: benchBin(t), RepoRoot: root, CacheDir: t.TempDir(),
			OneStepRuns: 20, LatencyRuns: 4, LatencyInFlight: 2, FloorLoops: 1, Fsync: []string{"asis"},
			Shapes: []string{bench.ShapeOneStep}, Contenders: []bench.Contender{{Name: "floor", Kind: bench.KindFloor}},
			Log: &log,
		})
		if err != nil {
			t.Fatalf("bench: %v\n%s", err, log.String())
		}
		return log.String()
	}
	log := run()
	if cluster.Running(context.Background()) || !strings.Contains(log, "stopped the benchmark cluster it started ("+dir) {
		t.Errorf("the cluster the benchmark started runs on (%v):\n%s", cluster.Running(context.Background()), log)
	}
	if err := cluster.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	log = run()
	if !cluster.Running(context.Background()) || !strings.Contains(log, "was running before and is left running; stop it with `pgflow-wasm localdb down --dir "+dir) {
		t.Errorf("a cluster that was running (%v):\n%s", cluster.Running(context.Background()), log)
	}
}

// With a real pgmq's files, the private cluster offers it, and every contender is measured on
// both layers, each against its own floor, the database's CPU included. The real pgmq 1.5.1
// is test data kept beside the repository (../shared, or pgtest.RealPgmqEnv).
func TestBenchMeasuresOurLayerAndTheRealPgmq(t *testing.T) {
	t.Parallel()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	files := pgtest.RealPgmq(t) // skips the test where the files are absent
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir(): its parents are closed to the postgres user when we run as root.
	dir, err := os.MkdirTemp("", "pgflow-wasm-bench-layers-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() {
		if c, err := localpg.New(localpg.Config{Dir: dir}); err == nil {
			_ = c.Remove(context.Background())
		}
	})
	var log bytes.Buffer
	rep, err := bench.Run(context.Background(), bench.Config{
		ClusterDir: dir, ExtensionFiles: files, Binary: bin, FloorBinary: benchBin(t), RepoRoot: root, CacheDir: t.TempDir(),
		OneStepRuns: 40, LatencyRuns: 4, LatencyInFlight: 2, FloorLoops: 2, Fsync: []string{"asis"},
		Shapes: []string{bench.ShapeOneStep},
		Contenders: []bench.Contender{{Name: "floor", Kind: bench.KindFloor},
			{Name: "wazero/c/notify", Kind: bench.KindWorker, Lang: "c", Engine: "wazero", Signal: "notify"}},
		Log: &log,
	})
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "template of the ours layer: pgmq 1.5.0+pgflow-wasm") ||
		!strings.Contains(log.String(), "template of the real layer: pgmq 1.5.1 (real extension)") {
		t.Errorf("the log does not say which pgmq each template has:\n%s", log.String())
	}
	layers := map[string]int{}
	for _, r := range rep.Results {
		layers[r.Layer]++
		if r.Err != "" {
			t.Errorf("%s (%s): %s", r.Contender, r.Layer, r.Err)
			continue
		}
		if r.TasksPerSec <= 0 || r.DBCPU < 0 || (r.Kind != bench.KindFloor && r.RatioToFloor <= 0) {
			t.Errorf("%s (%s): incomplete figures (the private cluster's CPU is read): %+v", r.Contender, r.Layer, r)
		}
	}
	if layers[bench.LayerOurs] != 2 || layers[bench.LayerReal] != 2 {
		t.Errorf("results by layer = %v, want both contenders on each", layers)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, want := range []string{"| real/floor", "| real/wazero/c/notify", "| wazero/c/notify"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}

// benchBin is the pgflow-wasm-bench command, which runs the floor.
func benchBin(t *testing.T) string {
	t.Helper()
	bin, err := testbin.Build("pgflow-wasm-bench")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
