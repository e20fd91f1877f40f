package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/procstat"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// ShapeWorkers runs N pgflow-wasm processes on one database, for each N of
// Config.WorkerCounts: the one-step runs (queued before the workers start) for throughput and
// the database's CPU per task, then the chain (closed loop) for the hop. Only pgflow-wasm
// contenders take part.
const ShapeWorkers = "workers"

// harnessApp is the application_name of the harness's own connections, so that the
// workers' connections can be counted apart.
const harnessApp = "pgflow-wasm bench harness"

// WorkersResult is what N worker processes did on one database.
type WorkersResult struct {
	Workers int
	// LockWaits is the mean number of the database's backends waiting on a heavyweight lock
	// (pg_stat_activity.wait_event_type = 'Lock'), sampled every 20 ms over both phases;
	// LockWaitShare the share of samples with at least one.
	LockWaits     float64
	LockWaitShare float64
	// Connections is the most connections the workers held at once (every client backend
	// of the database but the harness's), ConnsPerWorker that over Workers.
	Connections    int
	ConnsPerWorker float64
	// TopLockWait is the lock the waiting backends waited for most often (wait_event), with
	// its share of the lock-wait samples.
	TopLockWait string
	// TasksPerFetch and TasksPerWrite are the one-step phase's mean tasks per fetch
	// transaction and per outcome transaction: pgflow stamps every task of one transaction
	// with its start (started_at, completed_at). Fixed costs per transaction (start_tasks is
	// planned at every call) are shared by this many tasks.
	TasksPerFetch, TasksPerWrite float64
}

// measureWorkers runs the workers shape for one contender and one worker count.
func (r *runner) measureWorkers(ctx context.Context, c Contender, fsync string, n int) Result {
	res := Result{Contender: fmt.Sprintf("%s x%d", c.Name, n), Kind: c.Kind, Shape: ShapeWorkers, Fsync: fsync,
		Workers: &WorkersResult{Workers: n}}
	if err := r.measureWorkersInto(ctx, c, n, &res); err != nil {
		res.Err = err.Error()
	}
	return res
}

func (r *runner) measureWorkersInto(ctx context.Context, c Contender, n int, res *Result) error {
	if c.Kind != KindWorker {
		return fmt.Errorf("the workers shape runs pgflow-wasm contenders only")
	}
	lang := c.Lang
	// One flows file with both flows: every worker serves both.
	oneFlow, onePath, err := r.flowsYAML(ShapeOneStep, lang, c.Reuse)
	if err != nil {
		return err
	}
	chainFlow, chainPath, err := r.flowsYAML(ShapeChain, lang, c.Reuse)
	if err != nil {
		return err
	}
	a, err := os.ReadFile(onePath)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(chainPath)
	if err != nil {
		return err
	}
	both := string(a) + strings.TrimPrefix(string(b), "flows:\n")
	flowsPath := filepath.Join(r.tmp, fmt.Sprintf("flows-workers-%s.yaml", lang))
	if err := os.WriteFile(flowsPath, []byte(both), 0o644); err != nil {
		return err
	}
	file, err := flowfile.Load(flowsPath)
	if err != nil {
		return fmt.Errorf("%v (build the examples: make examples)", err)
	}
	url, pool, drop, err := r.compiledDatabase(ctx, "pgflow_bench_workers", file)
	if err != nil {
		return err
	}
	defer drop()
	// The runs are queued before the workers start and hidden from them until every worker
	// is ready: otherwise the first worker up would run them alone while the others start.
	tasks := r.cfg.OneStepRuns
	if err := prefill(ctx, pool, oneFlow, `{"name": "Ada"}`, tasks-1); err != nil {
		return fmt.Errorf("starting runs: %w", err)
	}
	queue := schema.QueueTable(oneFlow)
	if _, err := pool.Exec(ctx, `update `+queue+` set vt = clock_timestamp() + interval '1 hour'`); err != nil {
		return err
	}
	if _, err := r.admin.Exec(ctx, "checkpoint"); err != nil {
		return err
	}
	procs := make([]*process, 0, n)
	defer func() {
		for _, p := range procs {
			_ = p.stop()
		}
	}()
	traces := make([]string, n)
	for i := range n {
		traces[i] = filepath.Join(r.tmp, fmt.Sprintf("trace-workers-%d-%d-%d.jsonl", n, i, time.Now().UnixNano()))
		p, err := r.launch(ctx, c, url, oneFlow, flowsPath, traces[i])
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	// After the workers' start-up: the statements of the one-step phase, idle loops included.
	r.startStatements(ctx, res)
	sampler := startActivitySampler(ctx, pool, databaseName(url))
	cpu0 := workersCPU(procs)
	db0 := r.dbCPU()
	// Show the runs, and start the last one in the same transaction: its message's insert
	// notifies every worker at once (--signal notify).
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `update `+queue+` set vt = clock_timestamp()`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `select pgflow.start_flow($1, $2::jsonb)`, oneFlow, `{"name": "Ada"}`)
		return err
	}); err != nil {
		sampler.stop()
		return err
	}
	if err := waitCompleted(ctx, pool, oneFlow, tasks, procs[0]); err != nil {
		sampler.stop()
		return err
	}
	cpu1 := workersCPU(procs)
	db1 := r.dbCPU()
	r.endStatements(ctx, url, tasks, res)
	if err := pool.QueryRow(ctx, `
		select coalesce(count(*)::float8 / nullif(count(distinct (last_worker_id, started_at)), 0), 0),
		       coalesce(count(*)::float8 / nullif(count(distinct completed_at), 0), 0)
		from pgflow.step_tasks where flow_slug = $1 and status = 'completed'`, oneFlow).
		Scan(&res.Workers.TasksPerFetch, &res.Workers.TasksPerWrite); err != nil {
		sampler.stop()
		return err
	}
	res.Tasks = tasks
	res.WorkerCPU = cpu1 - cpu0
	res.DBCPU = -1
	if db0 >= 0 && db1 >= 0 {
		res.DBCPU = db1 - db0
	}
	if res.Seconds, err = busySeconds(ctx, pool, oneFlow); err != nil {
		sampler.stop()
		return err
	}
	if res.Seconds > 0 {
		res.TasksPerSec = float64(tasks) / res.Seconds
	}
	began, err := dbNow(ctx, pool)
	if err == nil {
		err = closedLoop(ctx, pool, chainFlow, `{"name": "Ada"}`, r.cfg.ChainRuns, r.cfg.ChainInFlight)
	}
	s := sampler.stop()
	if err != nil {
		return err
	}
	if res.Latency, err = runLatency(ctx, pool, chainFlow, began); err != nil {
		return err
	}
	for _, p := range procs {
		if rss, _ := procstat.PeakRSS(p.pid()); rss > res.PeakRSS {
			res.PeakRSS = rss
		}
	}
	w := res.Workers
	if s.samples > 0 {
		w.LockWaits = float64(s.lockWaiters) / float64(s.samples)
		w.LockWaitShare = float64(s.withWaiters) / float64(s.samples)
	}
	w.Connections = s.maxConns
	w.ConnsPerWorker = float64(s.maxConns) / float64(n)
	w.TopLockWait = s.topLockWait()
	for i, p := range procs {
		if err := p.stop(); err != nil {
			return fmt.Errorf("worker %d of %d did not stop cleanly: %v; log: %s", i+1, n, err, tailFile(p.logPath))
		}
	}
	procs = nil
	// After the stops: every trace's last lines are written.
	if res.Hop, res.HopParts, err = hopBreakdown(ctx, pool, chainFlow, traces...); err != nil {
		return fmt.Errorf("hop breakdown: %w", err)
	}
	return nil
}

func workersCPU(procs []*process) time.Duration {
	var d time.Duration
	for _, p := range procs {
		c, _ := procstat.CPU(p.pid())
		d += c
	}
	return d
}

// activitySampler reads pg_stat_activity of one database every 20 ms.
type activitySampler struct {
	done chan struct{}
	out  chan activity
}

type activity struct {
	samples, lockWaiters, withWaiters, maxConns int
	events                                      map[string]int // lock wait_event -> backends seen waiting on it
}

func (a activity) topLockWait() string {
	top, n := "", 0
	for ev, c := range a.events {
		if c > n || (c == n && ev < top) {
			top, n = ev, c
		}
	}
	if top == "" {
		return "none"
	}
	return fmt.Sprintf("%s (%.0f%%)", top, 100*float64(n)/float64(a.lockWaiters))
}

func startActivitySampler(ctx context.Context, pool *pgxpool.Pool, db string) *activitySampler {
	s := &activitySampler{done: make(chan struct{}), out: make(chan activity, 1)}
	var once sync.Once
	go func() {
		var a activity
		defer func() { once.Do(func() { s.out <- a }) }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var waiting, conns int
			var events []string
			if err := pool.QueryRow(ctx, `select count(*) filter (where wait_event_type = 'Lock'),
				count(*) filter (where coalesce(application_name, '') <> $2),
				coalesce(array_agg(wait_event) filter (where wait_event_type = 'Lock'), '{}')
				from pg_stat_activity where datname = $1 and backend_type = 'client backend'`, db, harnessApp).Scan(&waiting, &conns, &events); err != nil {
				continue
			}
			for _, ev := range events {
				if a.events == nil {
					a.events = map[string]int{}
				}
				a.events[ev]++
			}
			a.samples++
			a.lockWaiters += waiting
			if waiting > 0 {
				a.withWaiters++
			}
			a.maxConns = max(a.maxConns, conns)
		}
	}()
	return s
}

func (s *activitySampler) stop() activity {
	close(s.done)
	return <-s.out
}
