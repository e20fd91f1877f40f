// Package recovery finds tasks a dead worker left `started` and hands them back to pgflow.
//
// pgflow 0.8 never requeues such tasks: their runs hang forever. The sweep fails each stalled
// task through pgflow.fail_task with a message saying why, which is pgflow's own retry path:
// the task returns to `queued` and its message becomes visible after the retry delay, or, when
// its attempts are used up, the task and its run fail with that message. Requeues are thus
// bounded by the step's max_attempts, and every state change goes through pgflow's functions.
//
// When a task counts as stalled depends on the kind of worker that started it:
//
//   - A pgflow-wasm worker (function_name "pgflow-wasm") is gone when no session holds its
//     liveness lock (package liveness) past a short grace, or when its heartbeat is stale.
//     Such workers stop every handler at its step timeout, so a task started longer ago than
//     its timeout plus a margin has no live handler either, whoever holds it.
//   - Any other worker (pgflow's TypeScript worker) may run a handler for as long as it likes
//     and heartbeats only between batches, so its tasks are judged by its heartbeat alone,
//     with a long threshold of their own (ForeignStaleAfter; 0 leaves them alone).
//
// The sweeper never counts itself among the dead (Self). One sweep runs at a time per
// database (a session advisory lock); each stalled task is then failed in a transaction of
// its own that first locks the task's run (the order pgflow's functions and our completer
// take locks in) and re-checks that the same attempt still holds it (package taskwrite), so
// a sweep never deadlocks with a completion writer and never fails a task that moved on.
package recovery

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/host/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/host/taskwrite"
)

// Config sets when a task counts as stalled.
type Config struct {
	Flows []string // only these flows' tasks are swept (other workers may serve other flows)
	// WorkerStaleAfter is how old a pgflow-wasm worker's last heartbeat may be before its
	// tasks are recovered, whatever its liveness lock says.
	WorkerStaleAfter time.Duration
	// LivenessGrace: a pgflow-wasm worker whose liveness lock no session holds is gone once its
	// heartbeat is older than this and the server has been up longer than this (a live worker
	// retakes its lock and heartbeats within a second of reconnecting). Default 5 s.
	LivenessGrace time.Duration
	// StartedMargin is added to the step timeout: a pgflow-wasm task started longer ago than
	// that is recovered.
	StartedMargin time.Duration
	// ForeignStaleAfter is how old the heartbeat of a worker of another kind may be before its
	// tasks are recovered (for a task whose worker row is gone: how long ago it started).
	// 0 never recovers them.
	ForeignStaleAfter time.Duration
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
	Attempt   int    // the attempt that stalled
	Reason    string // the fail_task message
	Status    string // "queued" (will be retried) or "failed" (attempts used up)
	Attempts  int
}

const lockKey = "pgflow-wasm:recovery"

// stalledSQL lists stalled tasks of live runs with the reason, reading only: the tasks are
// failed one by one afterwards. $1 flows, $2 margin seconds, $3 stale-heartbeat seconds,
// $4 the sweeper's own worker ids, $5 liveness grace seconds, $6 foreign stale seconds (0: off).
var stalledSQL = `
with held as materialized (` + liveness.HeldLocksSQL + `),
task as (
  select st.flow_slug, st.run_id, st.step_slug, st.task_index, st.attempts_count, st.started_at,
         st.last_worker_id, coalesce(s.opt_timeout, f.opt_timeout) as timeout,
         w.worker_id, w.function_name, w.last_heartbeat_at,
         w.function_name = '` + liveness.FunctionName + `' as ours,
         coalesce(st.last_worker_id = any($4::text[]::uuid[]), false) as self,
         exists (select 1 from held where held.objid = ` + liveness.KeySQL("w.worker_id") + `) as locked
  from pgflow.step_tasks st
  join pgflow.runs r on r.run_id = st.run_id and r.status = 'started'
  join pgflow.steps s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
  join pgflow.flows f on f.flow_slug = st.flow_slug
  left join pgflow.workers w on w.worker_id = st.last_worker_id
  where st.status = 'started' and st.flow_slug = any($1::text[])
),
judged as (
  select t.*, case
    when t.ours and not t.self and t.last_heartbeat_at < clock_timestamp() - make_interval(secs => $3::float8)
      then 'its worker ' || t.worker_id || ' stopped heartbeating at ' || to_char(t.last_heartbeat_at, 'YYYY-MM-DD HH24:MI:SS TZ')
    when t.ours and not t.self and not t.locked
         and t.last_heartbeat_at < clock_timestamp() - make_interval(secs => $5::float8)
         and pg_catalog.pg_postmaster_start_time() < clock_timestamp() - make_interval(secs => $5::float8)
      then 'its worker ' || t.worker_id || ' is gone (no session holds its liveness lock; last heartbeat at '
           || to_char(t.last_heartbeat_at, 'YYYY-MM-DD HH24:MI:SS TZ') || ')'
    when t.ours and t.started_at < clock_timestamp() - make_interval(secs => t.timeout + $2::float8)
      then 'it was started at ' || to_char(t.started_at, 'YYYY-MM-DD HH24:MI:SS TZ') || ', longer ago than its timeout ('
           || t.timeout || ' s) plus ' || $2::float8 || ' s'
    when not coalesce(t.ours, false) and $6::float8 > 0 and t.worker_id is null
         and t.started_at < clock_timestamp() - make_interval(secs => $6::float8)
      then 'its worker ' || coalesce(t.last_worker_id::text, '(unknown)') || ' is not registered and it was started at '
           || to_char(t.started_at, 'YYYY-MM-DD HH24:MI:SS TZ')
    when not coalesce(t.ours, false) and $6::float8 > 0 and t.worker_id is not null
         and t.last_heartbeat_at < clock_timestamp() - make_interval(secs => $6::float8)
      then 'its worker ' || t.worker_id || ' (' || t.function_name || ') stopped heartbeating at '
           || to_char(t.last_heartbeat_at, 'YYYY-MM-DD HH24:MI:SS TZ')
  end as reason
  from task t
)
select flow_slug, run_id::text, step_slug, task_index, attempts_count, reason
from judged where reason is not null
order by run_id, step_slug, task_index`

// Sweep recovers stalled tasks once and returns them. When another worker is sweeping, it
// returns at once with nothing.
func Sweep(ctx context.Context, pool *pgxpool.Pool, cfg Config) ([]Recovered, error) {
	if cfg.LivenessGrace <= 0 {
		cfg.LivenessGrace = 5 * time.Second
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext($1))`, lockKey).Scan(&got); err != nil || !got {
		return nil, err
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `select pg_advisory_unlock(hashtext($1))`, lockKey); err != nil {
			conn.Conn().Close(context.Background()) // a session lock must not outlive the sweep
		}
	}()
	self := cfg.Self
	if self == nil {
		self = []string{}
	}
	rows, err := conn.Query(ctx, stalledSQL, cfg.Flows, cfg.StartedMargin.Seconds(), cfg.WorkerStaleAfter.Seconds(), self,
		cfg.LivenessGrace.Seconds(), cfg.ForeignStaleAfter.Seconds())
	if err != nil {
		return nil, err
	}
	stalled, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Recovered, error) {
		var r Recovered
		err := row.Scan(&r.FlowSlug, &r.RunID, &r.StepSlug, &r.TaskIndex, &r.Attempt, &r.Reason)
		return r, err
	})
	if err != nil {
		return nil, err
	}
	var out []Recovered
	for _, r := range stalled {
		r.Reason = fmt.Sprintf("Task stalled: %s; returned to pgflow by pgflow-wasm recovery", r.Reason)
		calls := []taskwrite.Call{{RunID: r.RunID, StepSlug: r.StepSlug, TaskIndex: r.TaskIndex, Attempt: r.Attempt, Arg: r.Reason}}
		res := make([]taskwrite.Result, 1)
		b := &pgx.Batch{}
		taskwrite.Queue(b, taskwrite.Fail, calls, res)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return out, fmt.Errorf("fail_task(%s %s[%d]): %w", r.RunID, r.StepSlug, r.TaskIndex, err)
		}
		if res[0].Stale {
			continue // completed, failed or restarted since the candidates were read
		}
		r.Status, r.Attempts = res[0].Status, res[0].Attempts
		out = append(out, r)
	}
	return out, nil
}
