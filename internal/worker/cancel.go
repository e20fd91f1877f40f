package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
)

// pgflow does not stop a handler when it gives up on its task: a run that failed (a task
// out of attempts, an output a map step cannot take, a condition with when_unmet: fail), a
// step skipped by when_exhausted, a task another worker now runs. pgflow 0.15.1+ marks such
// tasks `cancelled` or `skipped`; before, they stay `started` in a failed run or a skipped
// step. Either way a handler left running wastes its slot until its timeout, and its late
// outcome is at best ignored. So the worker stops them:
//
//   - at once, when it wrote the failure that failed the run itself (onWritten);
//   - otherwise within CancelCheckInterval: the watch asks the database about the tasks
//     whose handlers have run at least that long (shorter ones end before it could tell).

// watchSQL returns, for each task given (run, step, index, attempt), why pgflow no longer
// wants its outcome; tasks still wanted return no row.
const watchSQL = `
select t.ord, coalesce(st.status, 'gone'), coalesce(st.attempts_count, 0), coalesce(r.status, 'gone'), coalesce(ss.status, 'gone')
from unnest($1::text[]::uuid[], $2::text[], $3::int[], $4::int[]) with ordinality as t(run_id, step_slug, task_index, attempt, ord)
left join pgflow.step_tasks st on st.run_id = t.run_id and st.step_slug = t.step_slug and st.task_index = t.task_index
left join pgflow.runs r on r.run_id = t.run_id
left join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
where st.run_id is null or st.status <> 'started' or st.attempts_count <> t.attempt
   or r.status is distinct from 'started' or ss.status is distinct from 'started'`

// cancelWatch stops handlers whose tasks pgflow cancelled, until ctx ends.
func (w *Worker) cancelWatch(ctx context.Context) {
	service.Every(ctx, w.cfg.CancelCheckInterval, func(ctx context.Context) {
		tasks := w.known.running(time.Now().Add(-w.cfg.CancelCheckInterval))
		if len(tasks) == 0 {
			return
		}
		if err := w.checkCancelled(ctx, tasks); err != nil && ctx.Err() == nil {
			w.log.Debug("checking running tasks for cancellation failed; next round retries", "error", err)
		}
	})
}

func (w *Worker) checkCancelled(ctx context.Context, tasks []fetched.Task) error {
	runs, steps := make([]string, len(tasks)), make([]string, len(tasks))
	idx, attempts := make([]int32, len(tasks)), make([]int32, len(tasks))
	for i, t := range tasks {
		runs[i], steps[i], idx[i], attempts[i] = t.RunID, t.StepSlug, int32(t.TaskIndex), int32(t.Attempt)
	}
	rows, err := w.cfg.Pool.Query(ctx, watchSQL, runs, steps, idx, attempts)
	if err != nil {
		return err
	}
	type verdict struct {
		ord                   int64
		status                string
		attempts              int
		runStatus, stepStatus string
	}
	vs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (verdict, error) {
		var v verdict
		err := row.Scan(&v.ord, &v.status, &v.attempts, &v.runStatus, &v.stepStatus)
		return v, err
	})
	if err != nil {
		return err
	}
	for _, v := range vs {
		t := tasks[v.ord-1]
		w.known.cancel(keyOf(&t), t.Attempt, whyCancelled(t.Attempt, v.status, v.attempts, v.runStatus, v.stepStatus))
	}
	return nil
}

// whyCancelled says in words why pgflow no longer wants an attempt's outcome.
func whyCancelled(attempt int, status string, attempts int, runStatus, stepStatus string) *cancelled {
	c := &cancelled{status: status}
	switch {
	case status == "gone":
		c.reason = "the task is gone (its flow or run was deleted)"
	case runStatus == "failed":
		c.reason = "its run failed"
	case status == "skipped" || stepStatus == "skipped":
		c.reason = "its step was skipped"
	case attempts != attempt:
		c.reason = fmt.Sprintf("attempt %d holds it now", attempts)
	default:
		c.reason = fmt.Sprintf("it is %s (run %s, step %s)", status, runStatus, stepStatus)
	}
	return c
}

// cancelRunTasks stops at once this worker's running handlers of a run that just failed.
func (w *Worker) cancelRunTasks(runID string, because string) {
	if n := w.known.cancelRun(runID, &cancelled{status: "cancelled", reason: "its run failed: " + because}); n > 0 {
		w.log.Log(context.Background(), slog.LevelInfo, "run failed: stopping its running handlers", "run_id", runID, "handlers", n)
	}
}
