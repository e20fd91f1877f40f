// Package taskwrite calls pgflow's complete_task and fail_task for a batch of tasks, each
// only if the task is still started by the attempt that produced the outcome, in a form
// whose meaning does not depend on the query plan.
//
// The rule (docs/RATIONALE.md, "Volatile functions are called only on rows decided first"):
// a statement that calls a volatile function decides its rows first, in a query that
// calls nothing, and then calls the function once per decided row with no filter or join
// above the call. An earlier form put the guard in the WHERE clause beside the call; once
// PostgreSQL had statistics, the planner ran complete_task for every started task of every
// flow and filtered afterwards, writing one task's output into others.
//
// A write is queued into a pgx.Batch as three statements, run in the batch's one implicit
// transaction:
//
//  0. switch the rest of the transaction to generic plans (package plans): pgflow's
//     statements and the layer's then reuse their plans instead of planning at every call.
//  1. lock the batch's runs, in run order. pgflow's complete_task locks the run row first
//     too, so every writer takes run locks in the same order; and while a run is locked no
//     one can fail, requeue or restart its tasks, so the guard read next stays true until
//     the call.
//  2. pick the guarded rows in a MATERIALIZED CTE (the task is still `started`, its
//     attempts_count is the outcome's attempt and its last_worker_id the worker that started
//     it), then call the function laterally once per picked row and return exactly those
//     calls' results.
//
// A write retried after its commit did land, or a late write after recovery requeued the
// task, picks no row and changes nothing: the call is reported stale.
package taskwrite

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-wasm/pgflow-wasm/internal/plans"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Call is one guarded call: which task, which attempt, and the output JSON (complete) or the
// error message (fail).
type Call struct {
	RunID     string
	StepSlug  string
	TaskIndex int
	Attempt   int
	Arg       string
	// WorkerID, when set, is the pgflow.workers row that started the attempt: the call
	// applies only while the task is still started by it. An attempt's number alone can come
	// round again (a start whose count was given back is started anew), its worker with it
	// only on the worker that gave it back.
	WorkerID string
}

// Result is what pgflow's function returned for one call.
type Result struct {
	// Stale: the task was no longer started by this attempt; nothing was called.
	Stale bool
	// Status is the task's status after the call; "" when the function returned no row
	// (pgflow 0.8's complete_task does so when the output breaks a dependent map's contract).
	Status       string
	Attempts     int    // attempts_count after the call
	ErrorMessage string // the task's error_message after the call ("" when none)
	// Requeued: RequeueOne put the task back without fail_task (Status "queued").
	Requeued bool
}

// Kind chooses the pgflow function.
type Kind int

// Kinds.
const (
	Complete Kind = iota // pgflow.complete_task(run_id, step_slug, task_index, output jsonb)
	Fail                 // pgflow.fail_task(run_id, step_slug, task_index, error_message)
)

// Ids travel as text (::text::uuid): pgx cannot encode a Go string as a binary uuid and
// would build an error, then retry as text, for every parameter of every batch.
const lockRunsSQL = `
select run_id from pgflow.runs where run_id = any($1::text[]::uuid[]) order by run_id for update`

// lockRunsStatusSQL is lockRunsSQL that also says which runs were still started.
const lockRunsStatusSQL = `
select run_id::text, status = 'started' from pgflow.runs where run_id = any($1::text[]::uuid[]) order by run_id for update`

const guardedSQL = `
with todo as materialized (
  select t.ord, t.run_id, t.step_slug, t.task_index, t.arg
  from unnest($1::text[]::uuid[], $2::text[], $3::int[], $4::int[], $5::text[], $6::text[])
         with ordinality as t(run_id, step_slug, task_index, attempt, arg, worker_id, ord)
  -- The test is outside the subquery's WHERE so that only the primary key can serve it:
  -- with the status there, a planner whose statistics predate the backlog chose the partial
  -- index of started tasks and read all of them for every batch (134 ms under load).
  where (select st.status = 'started' and st.attempts_count = t.attempt
                and (t.worker_id = '' or st.last_worker_id is not distinct from nullif(t.worker_id, '')::uuid)
         from pgflow.step_tasks st
         where st.run_id = t.run_id and st.step_slug = t.step_slug and st.task_index = t.task_index)
  order by t.ord
)
select todo.ord, r.status, r.attempts_count, r.error_message
from todo left join lateral %s r on true`

// historySQL keeps a failed attempt in pgflow_wasm.task_attempts before fail_task overwrites
// its start, worker and error on pgflow's row: for the same rows the guarded call picks (the
// runs are locked, so the guard holds until the call), from the row as it is now.
const historySQL = `
insert into pgflow_wasm.task_attempts (run_id, step_slug, task_index, attempt, worker_id, started_at, error_message)
select st.run_id, st.step_slug, st.task_index, st.attempts_count, st.last_worker_id, st.started_at, t.arg
from unnest($1::text[]::uuid[], $2::text[], $3::int[], $4::int[], $5::text[], $6::text[]) as t(run_id, step_slug, task_index, attempt, arg, worker_id)
join pgflow.step_tasks st on st.run_id = t.run_id and st.step_slug = t.step_slug and st.task_index = t.task_index
where st.status = 'started' and st.attempts_count = t.attempt
  and (t.worker_id = '' or st.last_worker_id is not distinct from nullif(t.worker_id, '')::uuid)
on conflict do nothing`

// Options changes what a write does besides pgflow's call.
type Options struct {
	// AttemptHistory: a failure is also kept in pgflow_wasm.task_attempts (the table must
	// exist: schema.EnsureAttemptHistory).
	AttemptHistory bool
	// RunEnds, when set, receives the runs this write ended (completed or failed), read in
	// its transaction: the runs are locked from before the calls, so a run is reported by
	// the one write that ended it.
	RunEnds *[]RunEnd
}

// RunEnd is a run a write ended.
type RunEnd struct {
	RunID, Flow      string
	Status           string    // completed or failed
	StartedAt, Ended time.Time // pgflow's started_at, and completed_at or failed_at
}

// runsEndedSQL reads, after the calls, the runs of the batch that are no longer started.
const runsEndedSQL = `
select run_id::text, flow_slug, status, started_at, coalesce(completed_at, failed_at, now())
from pgflow.runs where run_id = any($1::text[]::uuid[]) and status <> 'started'`

var (
	completeSQL = fmt.Sprintf(guardedSQL, `pgflow.complete_task(todo.run_id, todo.step_slug, todo.task_index, todo.arg::jsonb)`)
	failSQL     = fmt.Sprintf(guardedSQL, `pgflow.fail_task(todo.run_id, todo.step_slug, todo.task_index, todo.arg)`)
)

// Queue adds the guarded calls to b. Calls should be sorted by run id (the order pgflow
// takes run locks in), and each task should appear once. results must have len(calls)
// entries; it is filled when the batch's results are read (SendBatch, then Close).
func Queue(b *pgx.Batch, kind Kind, calls []Call, results []Result, opts Options) {
	runs := make([]string, len(calls))
	steps := make([]string, len(calls))
	args := make([]string, len(calls))
	workers := make([]string, len(calls))
	idx := make([]int32, len(calls))
	attempts := make([]int32, len(calls))
	for i, c := range calls {
		runs[i], steps[i], args[i], workers[i] = c.RunID, c.StepSlug, c.Arg, c.WorkerID
		idx[i], attempts[i] = int32(c.TaskIndex), int32(c.Attempt)
		results[i] = Result{Stale: true} // until the guarded call returns its row
	}
	sql := completeSQL
	if kind == Fail {
		sql = failSQL
	}
	// Not while pgflow is being migrated: the calls are pgflow's as it is before or after.
	b.Queue(schema.UpgradeLockShared).Exec(func(pgconn.CommandTag) error { return nil })
	plans.QueueGeneric(b)
	var ended map[string]bool // runs no longer started before the calls
	if opts.RunEnds == nil {
		b.Queue(lockRunsSQL, runs).Exec(func(pgconn.CommandTag) error { return nil })
	} else {
		ended = map[string]bool{}
		b.Queue(lockRunsStatusSQL, runs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				var started bool
				if err := rows.Scan(&id, &started); err != nil {
					return err
				}
				ended[id] = !started
			}
			return rows.Err()
		})
	}
	if kind == Fail && opts.AttemptHistory {
		b.Queue(historySQL, runs, steps, idx, attempts, args, workers).Exec(func(pgconn.CommandTag) error { return nil })
	}
	b.Queue(sql, runs, steps, idx, attempts, args, workers).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var ord int64
			var status, errMsg *string
			var n *int
			if err := rows.Scan(&ord, &status, &n, &errMsg); err != nil {
				return err
			}
			r := &results[ord-1]
			r.Stale = false
			if status != nil {
				r.Status = *status
			}
			if n != nil {
				r.Attempts = *n
			}
			if errMsg != nil {
				r.ErrorMessage = *errMsg
			}
		}
		return rows.Err()
	})
	if opts.RunEnds != nil {
		b.Queue(runsEndedSQL, runs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var e RunEnd
				if err := rows.Scan(&e.RunID, &e.Flow, &e.Status, &e.StartedAt, &e.Ended); err != nil {
					return err
				}
				if !ended[e.RunID] {
					*opts.RunEnds = append(*opts.RunEnds, e)
				}
			}
			return rows.Err()
		})
	}
}

// Sender runs a batch: a pool, a connection or a transaction.
type Sender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// FailOne fails one task through the guarded call, in a transaction of its own: what
// RequeueOne does past its bound.
func FailOne(ctx context.Context, db Sender, c Call, opts Options) (Result, error) {
	res := make([]Result, 1)
	b := &pgx.Batch{}
	Queue(b, Fail, []Call{c}, res, opts)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, err
	}
	return res[0], nil
}
