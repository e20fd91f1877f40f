package retention

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
)

// lockKey (hashed by the database) lets one process prune at a time: every worker of a
// deployment may run the schedule, the one that takes the lock prunes, the others skip that turn.
const lockKey = "pgflow-wasm:prune"

// DefaultInterval is how often Periodic prunes unless told otherwise.
const DefaultInterval = time.Hour

// Periodic returns a service that prunes with opts every interval (the first a minute
// after it starts, or sooner for a shorter interval), when no other process is pruning.
func Periodic(pool *pgxpool.Pool, opts Options, interval time.Duration, log *slog.Logger) *service.Loop {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return service.NewLoop(func(ctx context.Context) {
		// Not at start: a worker that restarts in a loop does not prune in a loop.
		wait := min(interval, time.Minute)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = interval
			c, ran, err := PruneOnce(ctx, pool, opts)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("pruning old runs failed; trying again at the next turn", "error", err, "runs_deleted", c.Runs)
			case ran && c.Runs > 0:
				log.Info("pruned old runs", "runs", c.Runs, "step_tasks", c.StepTasks, "archived_messages", c.ArchivedMessages,
					"older_than", opts.OlderThan.String())
			}
		}
	})
}

// PruneOnce prunes like Prune when no other process holds the prune lock; ran is false
// when one did (nothing was done).
func PruneOnce(ctx context.Context, pool *pgxpool.Pool, opts Options) (c Counts, ran bool, err error) {
	conn, err := kit.OpenSession(ctx, pool, "pgflow-wasm prune lock")
	if err != nil {
		return c, false, err
	}
	defer conn.Close(context.WithoutCancel(ctx)) // ends the session, and the lock with it
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext($1))`, lockKey).Scan(&ran); err != nil || !ran {
		return c, false, err
	}
	c, err = Prune(ctx, pool, opts)
	return c, true, err
}
