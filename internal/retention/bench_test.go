package retention_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/retention"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/runseed"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

const liveFlow = `
flows:
  - slug: pr_live
    steps: [{slug: a, module: "{{echo}}"}]
`

// BenchmarkPruneWhileAWorkerServes seeds PGFLOW_WASM_PRUNE_RUNS finished runs 40 days old
// (default 20,000; docs/operations.md "Retention" measures 1,000,000; PGFLOW_WASM_PRUNE_BATCH
// sets the batch), keeps a worker busy
// with a backlog of one-step runs, and reports the worker's throughput for a while without
// a prune and then during one, and the time the prune took. Run it once:
//
//	PGFLOW_WASM_PRUNE_RUNS=1000000 go test -tags wasmtime -run '^$' -bench PruneWhileAWorkerServes -benchtime 1x -timeout 2h ./internal/retention/
func BenchmarkPruneWhileAWorkerServes(b *testing.B) {
	runs := 20_000
	if s := os.Getenv("PGFLOW_WASM_PRUNE_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("PGFLOW_WASM_PRUNE_RUNS=%q: want a number of runs", s)
		}
		runs = n
	}
	batch := retention.DefaultBatchSize
	if s := os.Getenv("PGFLOW_WASM_PRUNE_BATCH"); s != "" {
		var err error
		if batch, err = strconv.Atoi(s); err != nil || batch < 1 {
			b.Fatalf("PGFLOW_WASM_PRUNE_BATCH=%q: want a number of runs", s)
		}
	}
	for range b.N {
		db := pgtest.NewDB(b)
		ctx := context.Background()
		pool := db.Pool
		workertest.StartWorker(b, pool, workertest.FlowsFile(b, servedFlows+liveFlow[len("\nflows:\n"):], modules), worker.Config{})
		tmpl := templates(b, pool)
		seedStart := time.Now()
		if _, err := runseed.Seed(ctx, pool, runseed.Options{Templates: tmpl, Copies: runs, Age: 40 * 24 * time.Hour}); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `vacuum analyze`); err != nil {
			b.Fatal(err)
		}
		b.Logf("seeded %d runs in %.1f s (with vacuum analyze)", runs, time.Since(seedStart).Seconds())

		stop := keepBusy(b, pool)
		time.Sleep(5 * time.Second) // the backlog fills, the worker warms up
		window := 30 * time.Second
		base := completedIn(b, pool, window)

		var during float64
		var done sync.WaitGroup
		pruneDone := make(chan struct{})
		done.Add(1)
		go func() {
			defer done.Done()
			t0, n0 := time.Now(), liveCompleted(b, pool)
			<-pruneDone
			during = float64(liveCompleted(b, pool)-n0) / time.Since(t0).Seconds()
		}()
		b.ResetTimer()
		start := time.Now()
		pruned, err := retention.Prune(ctx, pool, retention.Options{OlderThan: 30 * 24 * time.Hour, BatchSize: batch})
		took := time.Since(start)
		b.StopTimer()
		close(pruneDone)
		done.Wait()
		stop()
		if err != nil {
			b.Fatal(err)
		}
		if pruned.Runs != int64(runs) {
			b.Fatalf("pruned %d runs, want %d", pruned.Runs, runs)
		}
		b.Logf("pruned %d runs (%d step states, %d tasks, %d archived messages, %v) in %d batches of %d: %.1f s, %.0f runs/s",
			pruned.Runs, pruned.StepStates, pruned.StepTasks, pruned.ArchivedMessages, pruned.Own, pruned.Batches, batch,
			took.Seconds(), float64(pruned.Runs)/took.Seconds())
		b.Logf("worker throughput: %.1f runs/s without a prune (%s), %.1f runs/s during it", base, window, during)
		b.ReportMetric(took.Seconds(), "prune-s")
		b.ReportMetric(base, "served-runs/s-alone")
		b.ReportMetric(during, "served-runs/s-during-prune")
	}
}

// keepBusy keeps a backlog of pr_live runs for the worker until the returned stop.
func keepBusy(b *testing.B, pool *pgxpool.Pool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var waiting int
			if err := pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'pr_live' and status = 'started'`).Scan(&waiting); err != nil {
				return
			}
			if waiting < 300 {
				if _, err := pool.Exec(ctx, `select pgflow.start_flow('pr_live', '{}'::jsonb) from generate_series(1, 200)`); err != nil {
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func liveCompleted(b *testing.B, pool *pgxpool.Pool) int64 {
	return count(b, pool, `select count(*) from pgflow.runs where flow_slug = 'pr_live' and status = 'completed'`)
}

// completedIn is the worker's throughput over window, in runs a second.
func completedIn(b *testing.B, pool *pgxpool.Pool, window time.Duration) float64 {
	n0, t0 := liveCompleted(b, pool), time.Now()
	time.Sleep(window)
	return float64(liveCompleted(b, pool)-n0) / time.Since(t0).Seconds()
}
