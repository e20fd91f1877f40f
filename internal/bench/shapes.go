package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/procstat"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Shapes of work.
const (
	ShapeOneStep = "one_step" // many one-step runs, queued before the contender starts
	ShapeMap     = "map"      // one run whose map step has many elements
	ShapeChain   = "chain"    // runs of a chain of steps, a few in flight at a time
)

// flowsYAML writes the flow of a shape, with the given language's example modules.
func (r *runner) flowsYAML(shape, lang string, reuseInstances bool) (string, string, error) {
	ext := ".wasm"
	if lang == "typescript" {
		ext = ".ts"
	}
	mod := func(example string) string {
		return filepath.Join(r.cfg.RepoRoot, "modules", "examples", lang, example+ext)
	}
	// Standard Go spends milliseconds starting its runtime in each fresh instance; its steps
	// reuse instances, as docs/guests.md recommends.
	reuse := ""
	if lang == "go" || reuseInstances {
		reuse = ", reuse_instance: true"
	}
	var b strings.Builder
	flow := "bench_" + shape
	fmt.Fprintf(&b, "flows:\n  - slug: %s\n    max_attempts: 3\n    base_delay: 1\n    timeout: 60\n    steps:\n", flow)
	switch shape {
	case ShapeOneStep:
		fmt.Fprintf(&b, "      - {slug: greet, module: %q%s}\n", mod("greet"), reuse)
	case ShapeMap:
		fmt.Fprintf(&b, "      - {slug: count, type: map, module: %q%s}\n", mod("word_count"), reuse)
	case ShapeChain:
		for i := 1; i <= r.cfg.ChainLength; i++ {
			deps := ""
			if i > 1 {
				deps = fmt.Sprintf(", depends_on: [s%d]", i-1)
			}
			fmt.Fprintf(&b, "      - {slug: s%d%s, module: %q%s}\n", i, deps, mod("greet"), reuse)
		}
	default:
		return "", "", fmt.Errorf("unknown shape %q: use %s, %s or %s", shape, ShapeOneStep, ShapeMap, ShapeChain)
	}
	path := filepath.Join(r.tmp, fmt.Sprintf("flows-%s-%s-%t.yaml", shape, lang, reuseInstances))
	return flow, path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// measure runs one contender on one shape in a fresh database.
func (r *runner) measure(ctx context.Context, c Contender, shape, fsync string) Result {
	res := Result{Contender: c.Name, Kind: c.Kind, Shape: shape, Fsync: fsync}
	if err := r.measureInto(ctx, c, shape, &res); err != nil {
		res.Err = err.Error()
	}
	return res
}

func (r *runner) measureInto(ctx context.Context, c Contender, shape string, res *Result) error {
	lang := c.Lang
	if lang == "" {
		lang = "c" // the floor and the reference run no module; the flow still names one
	}
	flow, flowsPath, err := r.flowsYAML(shape, lang, c.Reuse)
	if err != nil {
		return err
	}
	file, err := flowfile.Load(flowsPath)
	if err != nil {
		return fmt.Errorf("%v (build the examples: make examples)", err)
	}
	url, pool, drop, err := r.compiledDatabase(ctx, "pgflow_bench", file)
	if err != nil {
		return err
	}
	defer drop()
	tasks := 0
	switch shape {
	case ShapeOneStep:
		tasks = r.cfg.OneStepRuns
		err = prefill(ctx, pool, flow, `{"name": "Ada"}`, r.cfg.OneStepRuns)
	case ShapeMap:
		tasks = r.cfg.MapSize
		err = prefill(ctx, pool, flow, mapInput(r.cfg.MapSize), 1)
	case ShapeChain:
		tasks = r.cfg.ChainRuns * r.cfg.ChainLength
	}
	if err != nil {
		return fmt.Errorf("starting runs: %w", err)
	}
	// Start every measurement from clean buffers: no checkpoint left over from the last one.
	if _, err := r.admin.Exec(ctx, "checkpoint"); err != nil {
		return err
	}
	// On a chain, pgflow-wasm writes its task trace: where each hop's time goes (hops.go).
	tracePath := ""
	if shape == ShapeChain && c.Kind == KindWorker {
		tracePath = filepath.Join(r.tmp, fmt.Sprintf("trace-%d.jsonl", time.Now().UnixNano()))
	}
	r.startStatements(ctx, res)
	p, err := r.launch(ctx, c, url, flow, flowsPath, tracePath)
	if err != nil {
		return err
	}
	defer p.stop()
	cpu0, _ := procstat.CPU(p.pid())
	db0 := r.dbCPU()

	if shape == ShapeChain {
		began, err := dbNow(ctx, pool)
		if err != nil {
			return err
		}
		if err := closedLoop(ctx, pool, flow, `{"name": "Ada"}`, r.cfg.ChainRuns, r.cfg.ChainInFlight); err != nil {
			return err
		}
		if res.Latency, err = runLatency(ctx, pool, flow, began); err != nil {
			return err
		}
	} else if err := waitCompleted(ctx, pool, flow, tasks, p); err != nil {
		return err
	}
	cpu1, _ := procstat.CPU(p.pid())
	db1 := r.dbCPU()
	// Before one-step's latency phase: the statements of the tasks counted.
	r.endStatements(ctx, url, tasks, res)
	res.PeakRSS, _ = procstat.PeakRSS(p.pid())
	res.Tasks = tasks
	res.WorkerCPU = cpu1 - cpu0
	if db0 >= 0 && db1 >= 0 {
		res.DBCPU = db1 - db0
	} else {
		res.DBCPU = -1
	}
	if res.Seconds, err = busySeconds(ctx, pool, flow); err != nil {
		return err
	}
	if res.Seconds > 0 {
		res.TasksPerSec = float64(tasks) / res.Seconds
	}
	switch shape {
	case ShapeMap:
		res.Latency, err = runLatency(ctx, pool, flow, time.Time{})
	case ShapeOneStep:
		// Latency under a steady load, after the throughput phase: runs started one at a
		// time, a few in flight, each timed from start_flow to its completion.
		var began time.Time
		if began, err = dbNow(ctx, pool); err == nil {
			if err = closedLoop(ctx, pool, flow, `{"name": "Ada"}`, r.cfg.LatencyRuns, r.cfg.LatencyInFlight); err == nil {
				res.Latency, err = runLatency(ctx, pool, flow, began)
			}
		}
	}
	if err != nil {
		return err
	}
	if err := p.stop(); err != nil {
		return fmt.Errorf("%s did not stop cleanly: %v; log: %s", c.Name, err, tailFile(p.logPath))
	}
	if shape == ShapeChain {
		// After the stop: the trace's last lines are written.
		if res.Hop, res.HopParts, err = hopBreakdown(ctx, pool, flow, tracePath); err != nil {
			return fmt.Errorf("hop breakdown: %w", err)
		}
	}
	return nil
}

// dbCPU is the server's CPU time so far, or -1 when it cannot be read (outside server).
func (r *runner) dbCPU() time.Duration {
	if r.postmaster == 0 {
		return -1
	}
	d, err := procstat.ServerCPU(r.postmaster)
	if err != nil {
		return -1
	}
	return d
}

// prefill starts n runs of flow in chunks, each chunk its own transaction.
func prefill(ctx context.Context, pool *pgxpool.Pool, flow, input string, n int) error {
	for left := n; left > 0; {
		chunk := min(left, 250)
		if _, err := pool.Exec(ctx, `select pgflow.start_flow($1, $2::jsonb) from generate_series(1, $3)`, flow, input, chunk); err != nil {
			return err
		}
		left -= chunk
	}
	// A live database's autovacuum would have analysed tables that just grew by thousands of
	// rows; a fresh benchmark database has not, and pgflow 0.8.1's start_tasks may then plan
	// a walk over every queued task per call, or not, by the timing of autovacuum
	// (docs/benchmarks.md "Many workers, profiled"). Every contender meets analysed tables.
	queue := schema.QueueTable(flow)
	_, err := pool.Exec(ctx, `analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks, `+queue)
	return err
}

func mapInput(n int) string {
	words := []string{"the quick brown fox", "jumps over", "the lazy dog", "pgflow on any postgres", "wasm"}
	items := make([]string, n)
	for i := range items {
		b, _ := json.Marshal(words[i%len(words)])
		items[i] = string(b)
	}
	return "[" + strings.Join(items, ",") + "]"
}

// waitCompleted waits until n tasks of flow completed, failing early when the contender dies
// or a run fails.
func waitCompleted(ctx context.Context, pool *pgxpool.Pool, flow string, n int, p *process) error {
	deadline := time.Now().Add(15 * time.Minute)
	for {
		var done, failed int
		if err := pool.QueryRow(ctx, `select count(*) filter (where status = 'completed'), count(*) filter (where status = 'failed')
			from pgflow.step_tasks where flow_slug = $1`, flow).Scan(&done, &failed); err != nil {
			return err
		}
		switch {
		case failed > 0:
			return fmt.Errorf("%d tasks failed; log: %s", failed, tailFile(p.logPath))
		case done >= n:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("only %d of %d tasks completed in 15 minutes", done, n)
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("the contender exited (%v) with %d of %d tasks done; log: %s", err, done, n, tailFile(p.logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// closedLoop runs n runs, keeping inFlight of them going: each worker goroutine starts a run,
// waits for its end through the run's events, and starts the next.
func closedLoop(ctx context.Context, pool *pgxpool.Pool, flow, input string, n, inFlight int) error {
	st, err := store.Open(ctx, pool)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	left := n
	var firstErr error
	var wg sync.WaitGroup
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if left == 0 || firstErr != nil {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				r, err := st.StartAndWait(wctx, flow, json.RawMessage(input), 2*time.Second)
				cancel()
				if err == nil && r.Status != "completed" {
					err = fmt.Errorf("run %s %s: %s", r.ID, r.Status, r.Error)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func dbNow(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var t time.Time
	err := pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&t)
	return t, err
}

// busySeconds is the span from the first task started to the last task completed.
func busySeconds(ctx context.Context, pool *pgxpool.Pool, flow string) (float64, error) {
	var s *float64
	err := pool.QueryRow(ctx, `select extract(epoch from max(completed_at) - min(started_at))::float8
		from pgflow.step_tasks where flow_slug = $1 and status = 'completed'`, flow).Scan(&s)
	if s == nil {
		return 0, err
	}
	return *s, err
}

// runLatency gives percentiles of start_flow -> run completed, for runs started after since.
func runLatency(ctx context.Context, pool *pgxpool.Pool, flow string, since time.Time) (Percentiles, error) {
	return percentiles(ctx, pool, `select extract(epoch from completed_at - started_at)::float8 * 1000
		from pgflow.runs where flow_slug = $1 and status = 'completed' and started_at >= $2`, flow, since)
}

func percentiles(ctx context.Context, pool *pgxpool.Pool, valuesSQL string, args ...any) (Percentiles, error) {
	var p Percentiles
	err := pool.QueryRow(ctx, `select count(*), coalesce(percentile_cont(0.5) within group (order by v), 0),
		coalesce(percentile_cont(0.95) within group (order by v), 0), coalesce(percentile_cont(0.99) within group (order by v), 0)
		from (`+valuesSQL+`) t(v)`, args...).Scan(&p.N, &p.P50, &p.P95, &p.P99)
	return p, err
}
