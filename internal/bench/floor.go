package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// FloorConfig configures the naive protocol floor.
type FloorConfig struct {
	Flow      string
	Loops     int // independent read/start/complete loops, each with its own connection
	BatchSize int
}

// Floor speaks the protocol as pgflow's own clients do, with no handler at all: read a
// batch, start_tasks, then one complete_task call, in its own transaction, per task. It is
// what no worker that completes tasks one by one can beat on this database. It runs until ctx
// is done and returns how many tasks it completed.
func Floor(ctx context.Context, pool *pgxpool.Pool, cfg FloorConfig) (int64, error) {
	if cfg.Loops <= 0 {
		cfg.Loops = 1
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 10
	}
	worker := kit.NewUUID()
	if _, err := pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, $2, 'bench-floor')`,
		worker, cfg.Flow); err != nil {
		return 0, fmt.Errorf("registering the floor worker: %w", err)
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Loops)
	for range cfg.Loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := floorLoop(ctx, pool, cfg, worker, &done); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return done.Load(), <-errs
}

func floorLoop(ctx context.Context, pool *pgxpool.Pool, cfg FloorConfig, worker string, done *atomic.Int64) error {
	type task struct {
		run, step string
		idx       int
	}
	proto, err := schema.DetectPgflow(ctx, pool)
	if err != nil {
		return err
	}
	// pgflow 0.17+ takes the queue the messages came from (a flow's is named after it).
	claim, queueArg := `pgflow.start_tasks($1, $2::bigint[], $3::uuid)`, []any{}
	if proto.QueueNames {
		claim, queueArg = `pgflow.start_tasks($1, $2::bigint[], $3::uuid, $4)`, []any{cfg.Flow}
	}
	for ctx.Err() == nil {
		var ids []int64
		if err := pool.QueryRow(ctx, `select coalesce(array_agg(msg_id), '{}') from pgmq.read($1, 30, $2)`, cfg.Flow, cfg.BatchSize).Scan(&ids); err != nil {
			return err
		}
		if len(ids) == 0 {
			// An empty queue: look again soon (a bare loop has nothing better to do).
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		rows, err := pool.Query(ctx, `select run_id::text, step_slug, task_index from `+claim,
			append([]any{cfg.Flow, ids, worker}, queueArg...)...)
		if err != nil {
			return err
		}
		tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (task, error) {
			var t task
			return t, r.Scan(&t.run, &t.step, &t.idx)
		})
		if err != nil {
			return err
		}
		for _, t := range tasks {
			if _, err := pool.Exec(ctx, `select pgflow.complete_task($1::uuid, $2, $3, '{"ok": true}'::jsonb)`, t.run, t.step, t.idx); err != nil {
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
			done.Add(1)
		}
	}
	return nil
}
