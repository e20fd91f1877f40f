// Package recovery finds tasks a dead worker left `started` and hands them back to pgflow.
//
// pgflow 0.8 never requeues such tasks: their runs hang forever. The sweep fails each stalled
// task through pgflow.fail_task with a message saying why, which is pgflow's own retry path:
// the task returns to `queued` and its message becomes visible after the retry delay, or, when
// its attempts are used up, the task and its run fail with that message. Requeues are thus
// bounded by the step's max_attempts, and every state change goes through pgflow's functions.
//
// A task is stalled when its worker's heartbeat is stale (or its worker row is gone), or when it
// has been started for longer than its step timeout plus a margin (this worker stops handlers at
// their timeout, so a task past it has no live owner). Any number of workers may sweep at once:
// a transaction-scoped advisory lock lets one sweep run at a time and SKIP LOCKED keeps it off
// rows another transaction is changing.
package recovery

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config sets when a task counts as stalled.
type Config struct {
	Flows []string // only these flows' tasks are swept (other workers may serve other flows)
	// WorkerStaleAfter is how old a worker's last heartbeat may be before its tasks are
	// recovered. Keep it several heartbeat intervals long.
	WorkerStaleAfter time.Duration
	// StartedMargin is added to the step timeout: a task started longer ago than that is recovered.
	StartedMargin time.Duration
	// Self lists the sweeping worker's own ids: alive by definition, so a heartbeat that went
	// stale while the database was away does not make it requeue its own running tasks.
	Self []string
}

// Recovered is one task the sweep handed back.
type Recovered struct {
	FlowSlug  string
	RunID     string
	StepSlug  string
	TaskIndex int
	Reason    string
	Status    string // "queued" (will be retried) or "failed" (attempts used up)
	Attempts  int
}

const lockKey = "pgflow-wasm:recovery"

// stalledSQL lists stalled tasks of live runs, locking them. $1 flows, $2 margin seconds,
// $3 stale-heartbeat seconds, $4 the sweeper's own worker ids.
const stalledSQL = `
select st.flow_slug, st.run_id::text, st.step_slug, st.task_index,
       case
         when w.worker_id is null then 'its worker ' || coalesce(st.last_worker_id::text, '(unknown)') || ' is not registered'
         when w.last_heartbeat_at < clock_timestamp() - make_interval(secs => $3::float8)
           then 'its worker ' || w.worker_id || ' stopped heartbeating at ' || to_char(w.last_heartbeat_at, 'YYYY-MM-DD HH24:MI:SS TZ')
         else 'it was started at ' || to_char(st.started_at, 'YYYY-MM-DD HH24:MI:SS TZ') || ', longer ago than its timeout ('
              || coalesce(s.opt_timeout, f.opt_timeout) || ' s) plus ' || $2::float8 || ' s'
       end
from pgflow.step_tasks st
join pgflow.runs r on r.run_id = st.run_id and r.status = 'started'
join pgflow.steps s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
join pgflow.flows f on f.flow_slug = st.flow_slug
left join pgflow.workers w on w.worker_id = st.last_worker_id
where st.status = 'started' and st.flow_slug = any($1::text[])
  and ((coalesce(st.last_worker_id <> all($4::text[]::uuid[]), true)
        and (w.worker_id is null or w.last_heartbeat_at < clock_timestamp() - make_interval(secs => $3::float8)))
       or st.started_at < clock_timestamp() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + $2::float8))
order by st.run_id, st.step_slug, st.task_index
for update of st skip locked`

// Sweep recovers stalled tasks once and returns them. When another worker is sweeping, it
// returns at once with nothing.
func Sweep(ctx context.Context, pool *pgxpool.Pool, cfg Config) ([]Recovered, error) {
	var out []Recovered
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock(hashtext($1))`, lockKey).Scan(&got); err != nil || !got {
			return err
		}
		self := cfg.Self
		if self == nil {
			self = []string{}
		}
		rows, err := tx.Query(ctx, stalledSQL, cfg.Flows, cfg.StartedMargin.Seconds(), cfg.WorkerStaleAfter.Seconds(), self)
		if err != nil {
			return err
		}
		stalled, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Recovered, error) {
			var r Recovered
			err := row.Scan(&r.FlowSlug, &r.RunID, &r.StepSlug, &r.TaskIndex, &r.Reason)
			return r, err
		})
		if err != nil {
			return err
		}
		for _, r := range stalled {
			msg := fmt.Sprintf("Task stalled: %s; returned to pgflow by pgflow-wasm recovery", r.Reason)
			if err := tx.QueryRow(ctx, `select status, attempts_count from pgflow.fail_task($1::uuid, $2, $3, $4)`,
				r.RunID, r.StepSlug, r.TaskIndex, msg).Scan(&r.Status, &r.Attempts); err != nil {
				return fmt.Errorf("fail_task(%s %s[%d]): %w", r.RunID, r.StepSlug, r.TaskIndex, err)
			}
			r.Reason = msg
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
