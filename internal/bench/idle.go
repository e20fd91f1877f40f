package bench

import (
	"context"
	"path/filepath"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/procstat"
)

// measureIdle serves the example flows.yaml with --signal notify and no work, and counts the
// transactions the worker makes (pg_stat_database) and its resident memory.
func (r *runner) measureIdle(ctx context.Context) *Idle {
	idle := &Idle{Signal: "notify", Engine: "wazero"}
	if err := r.measureIdleInto(ctx, idle); err != nil {
		idle.Err = err.Error()
	}
	r.logf("idle: %.3f transactions per second per flow, RSS %d MB %s", idle.PerSecPerFlow, idle.RSS>>20, idle.Err)
	return idle
}

func (r *runner) measureIdleInto(ctx context.Context, idle *Idle) error {
	flowsPath := filepath.Join(r.cfg.RepoRoot, "flows.yaml")
	file, err := flowfile.Load(flowsPath)
	if err != nil {
		return err
	}
	idle.Flows = len(file.Flows)
	for _, fl := range file.Flows {
		if fl.MaxConcurrency > 0 {
			idle.LimitedFlows++
		}
	}
	url, pool, drop, err := r.compiledDatabase(ctx, "pgflow_bench_idle", file)
	if err != nil {
		return err
	}
	defer drop()
	pool.Close() // only the worker may use the database while it is watched
	dbName := databaseName(url)
	p, err := r.launch(ctx, Contender{Name: "idle", Kind: KindWorker, Engine: idle.Engine, Signal: idle.Signal}, url, "", flowsPath, "")
	if err != nil {
		return err
	}
	defer p.stop()
	// Let start-up traffic (compile, registration, first polls and sweep) settle and flush.
	time.Sleep(12 * time.Second)
	count := func() (int64, error) {
		var n int64
		err := r.admin.QueryRow(ctx, `select xact_commit + xact_rollback from pg_stat_database where datname = $1`, dbName).Scan(&n)
		return n, err
	}
	before, err := count()
	if err != nil {
		return err
	}
	began := time.Now()
	select {
	case <-time.After(time.Duration(r.cfg.IdleSeconds) * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	// Backends report their counters with a lag of up to ~10 s when idle; both counts lag
	// alike, so over a long window the error is a transaction or two.
	after, err := count()
	if err != nil {
		return err
	}
	idle.Seconds = time.Since(began).Seconds()
	idle.Transactions = after - before
	idle.PerSecPerFlow = float64(idle.Transactions) / idle.Seconds / float64(idle.Flows)
	idle.RSS, _ = procstat.RSS(p.pid())
	return nil
}
