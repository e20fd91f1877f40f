package taskwrite

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A task whose attempt ended by a fault (its worker died, the reply of the fetch that
// started it was lost, the commit of its outcome did not land) goes back to the queue the
// way pgflow's own recovery, requeue_stalled_tasks (0.13.2+), puts a stalled task back:
// status queued, started_at and last_worker_id cleared, the message visible at once, and no
// fail_task, so no retry delay, no error on the row and no run failed for a handler that
// never failed. The next start_tasks counts the start in attempts_count as it counts every
// start, which keeps each attempt's number its own (the outcome writes are guarded by it).
//
// The row it leaves is the one pgflow's fail_task leaves when it retries a task, on every
// release (0.8.1 included: there fail_task's retry sets status queued and started_at null
// and changes nothing else of the step or the run), less the error message; pgflow 0.13.2+'s
// requeue also clears last_worker_id, which every release allows (the column is nullable).
//
// Requeues are bounded, as upstream's are: where step_tasks counts them (requeued_count,
// 0.13.2+), at MaxRequeues, shared with upstream's own requeue; before, a task is requeued
// while it has been started fewer times than its max_attempts plus MaxRequeues. Past the
// bound the attempt is failed through fail_task with the reason (a task that kills every
// worker that runs it must end), never left started as upstream's permanently_stalled_at
// leaves it, which strands the run.

// MaxRequeues is upstream's max_requeues of requeue_stalled_tasks.
const MaxRequeues = 3

// RequeueOptions says what the database's step_tasks has.
type RequeueOptions struct {
	Options
	// Counted: step_tasks has requeued_count and last_requeued_at (pgflow 0.13.2+).
	Counted bool
	// QueueNames: step_tasks.queue_name names the message's queue (pgflow 0.17+); before,
	// the flow's slug does.
	QueueNames bool
	// GiveBack also takes back the start's count in attempts_count, so the next start has
	// the same attempt number, as if the task had run in place. Only for an attempt that no
	// one can still write an outcome for: the worker's own, started by a fetch whose reply
	// it never got, or forgotten after a lost COMMIT answer (a dead worker may be a live one
	// cut off, whose late write must not match the next attempt).
	GiveBack bool
}

// requeueSQL picks the task if it is still started by the attempt, of a started step of a
// started run (the run is locked before), decides whether the bound allows a requeue, puts
// it back and shows its message. $1 run, $2 step, $3 index, $4 attempt, $5 the reason
// (kept in the attempt history).
const requeueSQL = `
with todo as materialized (
  select st.run_id, st.step_slug, st.task_index, st.message_id, st.attempts_count, {{QUEUE}} as queue,
         {{MAY}} as may, {{WHY}} as why, $5::text as reason
  from pgflow.step_tasks st
  join pgflow.runs r on r.run_id = st.run_id and r.status = 'started'
  join pgflow.step_states ss on ss.run_id = st.run_id and ss.step_slug = st.step_slug and ss.status = 'started'
  join pgflow.steps s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
  join pgflow.flows f on f.flow_slug = st.flow_slug
  where st.run_id = $1::text::uuid and st.step_slug = $2 and st.task_index = $3
    and st.status = 'started' and st.attempts_count = $4
),
{{HISTORY}}
requeued as (
  update pgflow.step_tasks st
  set status = 'queued', started_at = null, last_worker_id = null {{COUNT}}
  from todo
  where todo.may and st.run_id = todo.run_id and st.step_slug = todo.step_slug and st.task_index = todo.task_index
  returning todo.queue, todo.message_id
),
shown as (
  select count(*) as n from requeued q, lateral pgmq.set_vt(q.queue, q.message_id, 0) v
)
select todo.may, todo.attempts_count, todo.why, (select n from shown) from todo`

// requeueHistory keeps the requeued attempt in pgflow_wasm.task_attempts, from the row as it
// is before the update (the CTEs see the statement's snapshot).
const requeueHistory = `
history as (
  insert into pgflow_wasm.task_attempts (run_id, step_slug, task_index, attempt, worker_id, started_at, error_message)
  select st.run_id, st.step_slug, st.task_index, st.attempts_count, st.last_worker_id, st.started_at, todo.reason
  from todo join pgflow.step_tasks st on st.run_id = todo.run_id and st.step_slug = todo.step_slug and st.task_index = todo.task_index
  where todo.may
  on conflict do nothing
  returning 1
),`

func requeueStatement(o RequeueOptions) string {
	r := strings.NewReplacer(
		"{{QUEUE}}", map[bool]string{true: "st.queue_name", false: "st.flow_slug"}[o.QueueNames],
		"{{MAY}}", map[bool]string{
			true:  "st.requeued_count < " + fmt.Sprint(MaxRequeues),
			false: "st.attempts_count < coalesce(s.opt_max_attempts, f.opt_max_attempts) + " + fmt.Sprint(MaxRequeues)}[o.Counted],
		"{{WHY}}", map[bool]string{
			true: "'it was requeued ' || st.requeued_count || ' times already, pgflow''s limit'",
			false: "'it was started ' || st.attempts_count || ' times, its max_attempts (' || coalesce(s.opt_max_attempts, f.opt_max_attempts) || ') plus " +
				fmt.Sprint(MaxRequeues) + ", the most pgflow-wasm requeues a task where pgflow keeps no requeue count'"}[o.Counted],
		"{{COUNT}}", map[bool]string{true: ", requeued_count = st.requeued_count + 1, last_requeued_at = now()", false: ""}[o.Counted]+
			map[bool]string{true: ", attempts_count = greatest(st.attempts_count - 1, 0)", false: ""}[o.GiveBack],
		// A given-back start is no attempt of its own: its number is the next start's, whose
		// own failure the history must be able to keep.
		"{{HISTORY}}", map[bool]string{true: requeueHistory, false: ""}[o.AttemptHistory && !o.GiveBack],
	)
	return r.Replace(requeueSQL)
}

// RequeueOne puts one task back in its queue if it is still started by c.Attempt, without
// spending an attempt, in a transaction of its own that first locks the task's run. c.Arg is
// why (kept in the attempt history unless the start is given back, and the fail_task
// message past the bound). Past the
// bound it fails the attempt through fail_task instead (FailOne), with c.Arg and the bound.
// Result.Requeued says which; Result.Stale that the task had moved on and nothing changed.
func RequeueOne(ctx context.Context, db Sender, c Call, o RequeueOptions) (Result, error) {
	b := &pgx.Batch{}
	b.Queue(lockRunsSQL, []string{c.RunID}).Exec(func(pgconn.CommandTag) error { return nil })
	res := Result{Stale: true}
	var may bool
	var why string
	b.Queue(requeueStatement(o), c.RunID, c.StepSlug, c.TaskIndex, c.Attempt, c.Arg).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var shown int64
			if err := rows.Scan(&may, &res.Attempts, &why, &shown); err != nil {
				return err
			}
			res.Stale = false
		}
		return rows.Err()
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, err
	}
	if res.Stale {
		return res, nil
	}
	if may {
		res.Status, res.Requeued = "queued", true
		return res, nil
	}
	c.Arg = c.Arg + "; not requeued again: " + why
	return FailOne(ctx, db, c, o.Options)
}
