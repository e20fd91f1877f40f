package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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

// Config.RequeueGuardInterval is how often the locks are renewed (the transaction that holds
// them ends, so it holds back vacuum for seconds, not for a task's whole life).
// Config.RequeueGuardAfter: a task that has run this long gets a lock. Upstream waits the
// flow timeout (1 s at least) plus 30 s, so every task is locked well before it could be taken.

const guardSQL = `
select count(*) from (
  select 1 from pgflow.step_tasks st
  join unnest($1::text[]::uuid[], $2::text[], $3::int[]) as t(run_id, step_slug, task_index)
    on st.run_id = t.run_id and st.step_slug = t.step_slug and st.task_index = t.task_index
  where st.status = 'started'
  for key share of st) locked`

// requeueGuardLoop holds the locks until ctx ends.
func (w *Worker) requeueGuardLoop(ctx context.Context) {
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
	t := time.NewTicker(w.cfg.RequeueGuardInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tasks := w.known.startedBefore(time.Now().Add(-w.cfg.RequeueGuardAfter))
		var runs, steps []string
		var idx []int32
		for _, task := range tasks {
			runs, steps, idx = append(runs, task.RunID), append(steps, task.StepSlug), append(idx, int32(task.TaskIndex))
		}
		// Lock on one connection, then let the other's transaction go.
		if len(tasks) > 0 {
			tx, err := w.guardTx(ctx, &conns[next])
			if err == nil {
				_, err = tx.Exec(ctx, guardSQL, runs, steps, idx)
			}
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("could not guard long tasks against pgflow's requeue_stalled_tasks", "tasks", len(tasks), "error", err)
				}
				if tx != nil {
					tx.Rollback(context.Background())
				}
				continue // keep the old locks
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
	}
}

// guardTx begins a transaction on *conn, connecting it first when needed.
func (w *Worker) guardTx(ctx context.Context, conn **pgx.Conn) (pgx.Tx, error) {
	if *conn == nil || (*conn).IsClosed() {
		cfg := w.cfg.Pool.Config().ConnConfig.Copy()
		cfg.RuntimeParams["application_name"] = "pgflow-wasm requeue guard"
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		*conn = c
	}
	return (*conn).Begin(ctx)
}
