package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/host/taskwrite"
	"github.com/pgflow-wasm/pgflow-wasm/poller"
)

// A fetch runs start_tasks and reads its reply in one round trip. When the connection dies
// after the commit but before the reply arrives, pgflow holds tasks as started by this
// worker that it never heard of: alive and heartbeating, the worker would keep them from
// every sweep until their timeout ran out. So the worker remembers the tasks it runs (from
// launch until their outcome is written), and every recovery round hands back, through
// fail_task, the tasks pgflow says it started but that it does not know, for flows with no
// fetch in flight.

// orphanAge: a task this young may belong to a fetch whose reply is being read.
const orphanAge = "2 seconds"

// taskSet is the tasks this worker runs or has outcomes of that are not written yet.
type taskSet struct {
	mu    sync.Mutex
	tasks map[taskKey]struct{}
}

type taskKey struct {
	run, step string
	index     int
}

func keyOf(t *poller.Task) taskKey { return taskKey{t.RunID, t.StepSlug, t.TaskIndex} }

func (s *taskSet) add(t *poller.Task) {
	s.mu.Lock()
	if s.tasks == nil {
		s.tasks = map[taskKey]struct{}{}
	}
	s.tasks[keyOf(t)] = struct{}{}
	s.mu.Unlock()
}

func (s *taskSet) remove(t *poller.Task) {
	s.mu.Lock()
	delete(s.tasks, keyOf(t))
	s.mu.Unlock()
}

func (s *taskSet) has(k taskKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tasks[k]
	return ok
}

// handBackOrphans fails the tasks pgflow holds as started by this worker that it does not
// know, and returns how many it handed back.
func (w *Worker) handBackOrphans(ctx context.Context) (int, error) {
	handed := 0
	for _, fs := range w.flows {
		if fs.fetching.Load() {
			continue
		}
		rows, err := w.cfg.Pool.Query(ctx, `select run_id::text, step_slug, task_index, attempts_count from pgflow.step_tasks
			where last_worker_id = $1::text::uuid and status = 'started' and started_at < now() - interval '`+orphanAge+`'`, fs.workerID)
		if err != nil {
			return handed, err
		}
		var calls []taskwrite.Call
		for rows.Next() {
			var c taskwrite.Call
			if err := rows.Scan(&c.RunID, &c.StepSlug, &c.TaskIndex, &c.Attempt); err != nil {
				rows.Close()
				return handed, err
			}
			if !w.known.has(taskKey{c.RunID, c.StepSlug, c.TaskIndex}) {
				c.Arg = fmt.Sprintf("Task stalled: worker %s started it, but the reply of start_tasks was lost (connection cut "+
					"during the fetch), so it never ran; returned to pgflow by pgflow-wasm", fs.workerID)
				calls = append(calls, c)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return handed, err
		}
		// A fetch that began meanwhile only started tasks younger than orphanAge.
		for _, c := range calls {
			res := make([]taskwrite.Result, 1)
			b := &pgx.Batch{}
			taskwrite.Queue(b, taskwrite.Fail, []taskwrite.Call{c}, res)
			if err := w.cfg.Pool.SendBatch(ctx, b).Close(); err != nil {
				return handed, err
			}
			if res[0].Stale {
				continue
			}
			handed++
			w.log.Warn("handed back a task started by a fetch whose reply was lost", "run_id", c.RunID, "flow", fs.def.Slug,
				"step", c.StepSlug, "task_index", c.TaskIndex, "attempt", c.Attempt, "status", res[0].Status)
			if res[0].Status == "queued" {
				w.wakeAfterRetry(fs, c.StepSlug, res[0].Attempts)
			}
		}
	}
	return handed, nil
}
