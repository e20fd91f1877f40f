// Package requeueguard keeps pgflow 0.13.2+'s requeue_stalled_tasks off a worker's long
// tasks (details below).
package requeueguard

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
)

// pgflow 0.13.2 added requeue_stalled_tasks(), which pg_cron runs every 15 s where pg_cron
// runs: it takes back every task started longer ago than its flow's timeout plus 30 s, with
// no regard to the step's own timeout or to whether its worker lives. A pgflow-wasm handler of
// a step whose timeout is longer than that would then run twice. The function picks its rows
// `FOR UPDATE SKIP LOCKED`; a row another transaction holds `FOR KEY SHARE` is skipped, while
// complete_task and fail_task (which update no key) are not held up by that lock. So, on
// such a database, the worker keeps a KEY SHARE lock on each of its tasks that has run a
// while, in a transaction renewed every few seconds: the next one takes the locks before
// the last one ends, so there is no moment without them. A killed worker's session ends and
// its locks with it: upstream's requeue (and our sweep) then take its tasks back as before.

// Config.Interval is how often the locks are renewed (the transaction that holds
// them ends, so it holds back vacuum for seconds, not for a task's whole life).
// Config.After: a task that has run this long gets a lock. Upstream waits the
// flow timeout (1 s at least) plus 30 s, so every task is locked well before it could be taken.

// Task names one started task.
type Task struct {
	RunID     string
	StepSlug  string
	TaskIndex int
}

// Config configures a Guard.
type Config struct {
	Pool     *pgxpool.Pool // its connection settings open the guard's two sessions
	Interval time.Duration
	After    time.Duration
	// StartedBefore lists the worker's tasks started before a time and still running.
	StartedBefore func(time.Time) []Task
	Log           *slog.Logger
}

// Guard is a Service holding the locks while it runs.
type Guard struct {
	cfg Config
	*service.Loop
}

// New returns a Guard; Start and Stop it like any service.
func New(cfg Config) *Guard {
	g := &Guard{cfg: cfg}
	g.Loop = service.NewLoop(g.run)
	return g
}

const guardSQL = `
select count(*) from (
  select 1 from pgflow.step_tasks st
  join unnest($1::text[]::uuid[], $2::text[], $3::int[]) as t(run_id, step_slug, task_index)
    on st.run_id = t.run_id and st.step_slug = t.step_slug and st.task_index = t.task_index
  where st.status = 'started'
  for key share of st) locked`

// run holds the locks until ctx ends.
func (g *Guard) run(ctx context.Context) {
	var held [2]pgx.Tx // the transaction holding the locks now, and the one before
	var conns [2]*pgx.Conn
	defer func() {
		for i := range conns {
			if conns[i] != nil {
				conns[i].Close(context.Background())
			}
		}
	}()
	next := 0
	service.Every(ctx, g.cfg.Interval, func(ctx context.Context) {
		tasks := g.cfg.StartedBefore(time.Now().Add(-g.cfg.After))
		var runs, steps []string
		var idx []int32
		for _, task := range tasks {
			runs, steps, idx = append(runs, task.RunID), append(steps, task.StepSlug), append(idx, int32(task.TaskIndex))
		}
		// Lock on one connection, then let the other's transaction go.
		if len(tasks) > 0 {
			tx, err := g.begin(ctx, &conns[next])
			if err == nil {
				_, err = tx.Exec(ctx, guardSQL, runs, steps, idx)
			}
			if err != nil {
				if ctx.Err() == nil {
					g.cfg.Log.Warn("could not guard long tasks against pgflow's requeue_stalled_tasks", "tasks", len(tasks), "error", err)
				}
				if tx != nil {
					tx.Rollback(context.Background())
				}
				return // keep the old locks
			}
			held[next] = tx
		}
		other := 1 - next
		if held[other] != nil {
			held[other].Rollback(ctx)
			held[other] = nil
		}
		if len(tasks) > 0 {
			next = other
		}
	})
}

// begin begins a transaction on *conn, connecting it first when needed.
func (g *Guard) begin(ctx context.Context, conn **pgx.Conn) (pgx.Tx, error) {
	if *conn == nil || (*conn).IsClosed() {
		c, err := kit.OpenSession(ctx, g.cfg.Pool, "pgflow-wasm requeue guard")
		if err != nil {
			return nil, err
		}
		*conn = c
	}
	return (*conn).Begin(ctx)
}
