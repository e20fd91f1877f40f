package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
)

// Step is one step of a run: its definition, its state and how many of its tasks are in
// each state.
type Step struct {
	Slug        string
	Type        string // single or map
	Index       int
	DependsOn   []string
	Status      string // created, started, completed, failed; skipped on pgflow 0.14+
	SkipReason  string // pgflow 0.14+ (schema.Protocol.Conditions)
	StartedAt   *time.Time
	CompletedAt *time.Time
	FailedAt    *time.Time
	Error       string
	// InitialTasks is how many tasks the step has (a map: its array's length), nil while
	// a map step waits for its input.
	InitialTasks *int
	Counts       map[string]int // task status -> how many tasks are in it
	// Tasks are the step's tasks in task_index order, filled by GetTree only (pages read
	// them a page at a time: Tasks).
	Tasks []Task
}

// TaskCount is how many tasks exist so far.
func (s *Step) TaskCount() int {
	n := 0
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// EndedAt is when the step completed or failed.
func (s *Step) EndedAt() *time.Time {
	if s.CompletedAt != nil {
		return s.CompletedAt
	}
	return s.FailedAt
}

// Steps reads the steps of a run in the flow's order, with task counts.
func (s *Store) Steps(ctx context.Context, id string) ([]Step, error) {
	runID, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	skip := "''"
	if s.proto.Conditions {
		skip = "coalesce(ss.skip_reason, '')"
	}
	rows, err := s.pool.Query(ctx, `
		select s.step_slug, s.step_type, s.step_index,
		       coalesce((select array_agg(d.dep_slug order by d.dep_slug) from pgflow.deps d
		                 where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '{}'),
		       ss.status, `+skip+`, ss.started_at, ss.completed_at, ss.failed_at, coalesce(ss.error_message, ''), ss.initial_tasks
		from pgflow.step_states ss
		join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
		where ss.run_id = $1::uuid order by s.step_index`, runID)
	if err != nil {
		return nil, err
	}
	steps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) {
		st := Step{Counts: map[string]int{}}
		err := row.Scan(&st.Slug, &st.Type, &st.Index, &st.DependsOn, &st.Status, &st.SkipReason,
			&st.StartedAt, &st.CompletedAt, &st.FailedAt, &st.Error, &st.InitialTasks)
		return st, err
	})
	if err != nil {
		return nil, err
	}
	rows, err = s.pool.Query(ctx, `select step_slug, status, count(*) from pgflow.step_tasks
		where run_id = $1::uuid group by step_slug, status`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var slug, status string
		var n int
		if err := rows.Scan(&slug, &status, &n); err != nil {
			return nil, err
		}
		for i := range steps {
			if steps[i].Slug == slug {
				steps[i].Counts[status] = n
			}
		}
	}
	return steps, rows.Err()
}

// Task is one task of a step: its attempts, timings, worker, input, output and error.
type Task struct {
	Index       int
	Status      string // queued, started, completed, failed; cancelled and skipped on pgflow 0.15.1+
	Attempts    int
	Error       string
	QueuedAt    time.Time
	StartedAt   *time.Time
	CompletedAt *time.Time
	FailedAt    *time.Time
	WorkerID    string // the worker that ran the last attempt
	// Input is what the handler received, rebuilt (pgflow stores none), and Output what it
	// returned: cut to CutBytes on a page (Tasks), whole in a tree read with its outputs,
	// Null where not read.
	Input  JSON
	Output JSON
	// Earlier are the failed attempts before the one pgflow's row describes, oldest first
	// (from pgflow_wasm.task_attempts: pgflow keeps only the last error); read by GetTree,
	// Tasks and TasksInStatus.
	Earlier []Attempt
}

// EndedAt is when the task completed or failed.
func (t *Task) EndedAt() *time.Time {
	if t.CompletedAt != nil {
		return t.CompletedAt
	}
	return t.FailedAt
}

// Tasks reads tasks first..first+limit-1 of a step (task_index order, which is a map's
// element order). task_index is dense, so a page is a range scan of the primary key.
func (s *Store) Tasks(ctx context.Context, runID string, step Step, first, limit int) ([]Task, error) {
	return s.tasks(ctx, runID, step, `t.task_index >= $3 and t.task_index < $3 + $4 order by t.task_index`, first, limit)
}

// TasksInStatus reads a page of a step's tasks in one status (say the failed elements of a
// map), in task_index order: skip of them, then up to limit.
func (s *Store) TasksInStatus(ctx context.Context, runID string, step Step, status string, skip, limit int) ([]Task, error) {
	return s.tasks(ctx, runID, step, `t.status = $5 order by t.task_index offset $3 limit $4`, skip, limit, status)
}

// IndicesInStatus lists the task_index of up to limit tasks of a step in one status, in order:
// the step header names its failed elements without paging through them.
func (s *Store) IndicesInStatus(ctx context.Context, id, stepSlug, status string, limit int) ([]int, error) {
	runID, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `select task_index from pgflow.step_tasks
		where run_id = $1::uuid and step_slug = $2 and status = $3 order by task_index limit $4`, runID, stepSlug, status, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// tasks reads a step's tasks that match cond (which uses $3 and $4, and may use $5: extra).
func (s *Store) tasks(ctx context.Context, id string, step Step, cond string, a, b int, extra ...any) ([]Task, error) {
	runID, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	args := append([]any{runID, step.Slug, a, b}, extra...)
	rows, err := s.pool.Query(ctx, `select t.task_index, t.status, t.attempts_count, coalesce(t.error_message, ''),
		       t.queued_at, t.started_at, t.completed_at, t.failed_at, coalesce(t.last_worker_id::text, ''),
		       `+jsonCols(inputExpr(step))+`, `+jsonCols("t.output")+`
		from pgflow.step_tasks t
		where t.run_id = $1::uuid and t.step_slug = $2 and `+cond, args...)
	if err != nil {
		return nil, err
	}
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Task, error) {
		var k Task
		var in, out *string
		var inN, outN *int
		err := row.Scan(&k.Index, &k.Status, &k.Attempts, &k.Error, &k.QueuedAt, &k.StartedAt, &k.CompletedAt,
			&k.FailedAt, &k.WorkerID, &in, &inN, &out, &outN)
		k.Input, k.Output = toJSON(in, inN), toJSON(out, outN)
		return k, err
	})
	if err != nil || len(tasks) == 0 {
		return tasks, err
	}
	return tasks, s.pageAttempts(ctx, runID, step.Slug, tasks)
}

// pageAttempts fills Earlier of a page of one step's tasks from pgflow-wasm's attempt
// history, as readEarlierAttempts does for a whole run: one look-up of the history's
// primary key per task.
func (s *Store) pageAttempts(ctx context.Context, runID, step string, tasks []Task) error {
	indices := make([]int, len(tasks))
	byIndex := map[int]*Task{}
	for i := range tasks {
		indices[i] = tasks[i].Index
		byIndex[tasks[i].Index] = &tasks[i]
	}
	rows, err := s.pool.Query(ctx, `
		select a.task_index, a.attempt, coalesce(a.worker_id::text, ''), a.started_at, a.failed_at,
		       left(coalesce(a.error_message, ''), $4)
		from pgflow_wasm.task_attempts a
		join pgflow.step_tasks st on st.run_id = a.run_id and st.step_slug = a.step_slug and st.task_index = a.task_index
		where a.run_id = $1::uuid and a.step_slug = $2 and a.task_index = any($3::int[]) and a.attempt < st.attempts_count
		order by a.task_index, a.attempt`, runID, step, indices, CutBytes)
	if err != nil {
		if dberr.UndefinedTable(err) {
			return nil // a database no pgflow-wasm worker has served: no history
		}
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var idx int
		var a Attempt
		if err := rows.Scan(&idx, &a.Attempt, &a.WorkerID, &a.StartedAt, &a.FailedAt, &a.Error); err != nil {
			return err
		}
		if k := byIndex[idx]; k != nil {
			k.Earlier = append(k.Earlier, a)
		}
	}
	return rows.Err()
}

// inputExpr is a SQL expression for the input a task's handler receives, rebuilt from the
// run input and the outputs of the step's dependencies the way pgflow's start_tasks builds
// it (pgflow stores no task input): a map task gets one element of its array, any other
// step {"run": <run input>, <dep>: <dep output>, ...}. Only completed dependencies count (on
// pgflow 0.14 a skipped one has no key). It refers to the task as t.
func inputExpr(step Step) string {
	runInput := `(select r.input from pgflow.runs r where r.run_id = t.run_id)`
	if step.Type == "map" {
		if len(step.DependsOn) == 0 {
			return runInput + ` -> t.task_index`
		}
		return mapElement(step.DependsOn[0])
	}
	expr := `jsonb_build_object('run', ` + runInput + `)`
	for _, d := range step.DependsOn {
		expr += fmt.Sprintf(` || coalesce((select jsonb_build_object(%s, (%s)) from pgflow.step_states ds
			where ds.run_id = t.run_id and ds.step_slug = %[1]s and ds.status = 'completed'), '{}')`, quote(d), depOutput(d))
	}
	return expr
}

// depOutput is a SQL expression for a dependency's output in task t's run: a single step's
// task output, or a map step's outputs in element order ([] when it had no elements).
func depOutput(dep string) string {
	return fmt.Sprintf(`select case when ds.step_type = 'map'
		    then (select coalesce(jsonb_agg(o.output order by o.task_index), '[]') from pgflow.step_tasks o
		          where o.run_id = t.run_id and o.step_slug = %[1]s and o.status = 'completed')
		    else (select o.output from pgflow.step_tasks o
		          where o.run_id = t.run_id and o.step_slug = %[1]s and o.status = 'completed' order by o.task_index limit 1) end
		from pgflow.steps ds where ds.flow_slug = t.flow_slug and ds.step_slug = %[1]s`, quote(dep))
}

// mapElement is a SQL expression for task t's element of its map step's only dependency:
// element t.task_index of a single step's output array or, when the dependency is a map
// itself, its task with the same index (the dependency completed, so its outputs are
// dense), without aggregating all of them for every task.
func mapElement(dep string) string {
	return fmt.Sprintf(`(select case when ds.step_type = 'map'
		    then (select o.output from pgflow.step_tasks o
		          where o.run_id = t.run_id and o.step_slug = %[1]s and o.task_index = t.task_index and o.status = 'completed')
		    else (select o.output -> t.task_index from pgflow.step_tasks o
		          where o.run_id = t.run_id and o.step_slug = %[1]s and o.status = 'completed' order by o.task_index limit 1) end
		from pgflow.steps ds where ds.flow_slug = t.flow_slug and ds.step_slug = %[1]s)`, quote(dep))
}

// quote makes a SQL string literal (step slugs are checked by pgflow, but never trusted).
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// RunValue is the full JSON text of a run's input or output ("input" or "output");
// ErrNotFound when the run or the value does not exist.
func (s *Store) RunValue(ctx context.Context, id, field string) ([]byte, error) {
	runID, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	if field != "input" && field != "output" {
		return nil, fmt.Errorf("a run has no value %q: %w", field, ErrNotFound)
	}
	var v *string
	err = s.pool.QueryRow(ctx, `select `+field+`::text from pgflow.runs where run_id = $1::uuid`, runID).Scan(&v)
	return valueOrNotFound(v, err)
}

// TaskValue is the full JSON text of a task's input or output.
func (s *Store) TaskValue(ctx context.Context, id, stepSlug string, index int, field string) ([]byte, error) {
	runID, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	if field != "input" && field != "output" {
		return nil, fmt.Errorf("a task has no value %q: %w", field, ErrNotFound)
	}
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(steps, func(st Step) bool { return st.Slug == stepSlug })
	if i < 0 {
		return nil, fmt.Errorf("run %s has no step %q: %w", runID, stepSlug, ErrNotFound)
	}
	expr := "t.output"
	if field == "input" {
		expr = inputExpr(steps[i])
	}
	var v *string
	err = s.pool.QueryRow(ctx, `select (`+expr+`)::text from pgflow.step_tasks t
		where t.run_id = $1::uuid and t.step_slug = $2 and t.task_index = $3`, runID, stepSlug, index).Scan(&v)
	return valueOrNotFound(v, err)
}

func valueOrNotFound(v *string, err error) ([]byte, error) {
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && v == nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return []byte(*v), nil
}

// RunState is a short digest of everything the run page shows that can change, for the
// live page: its fingerprint changes whenever a step or task changes state or attempt.
// Active is false once the run has ended.
func (s *Store) RunState(ctx context.Context, id string) (fingerprint string, active bool, err error) {
	runID, err := ParseRunID(id)
	if err != nil {
		return "", false, err
	}
	var status, steps, tasks string
	err = s.pool.QueryRow(ctx, `select r.status || ':' || r.remaining_steps,
		  coalesce((select string_agg(ss.step_slug || '=' || ss.status || '/' || coalesce(ss.initial_tasks, -1), ',' order by ss.step_slug)
		            from pgflow.step_states ss where ss.run_id = r.run_id), ''),
		  coalesce((select string_agg(x, ',' order by x) from (
		            select t.step_slug || '=' || t.status || '/' || count(*) || '/' || sum(t.attempts_count) as x
		            from pgflow.step_tasks t where t.run_id = r.run_id group by t.step_slug, t.status) g), '')
		from pgflow.runs r where r.run_id = $1::uuid`, runID).Scan(&status, &steps, &tasks)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, ErrNotFound
	}
	if err != nil {
		return "", false, err
	}
	return digest(status, steps, tasks), strings.HasPrefix(status, "started:"), nil
}

// digest is a short hex hash of its parts.
func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Digest is digest for the dashboard's own fingerprints (a page's rows).
func Digest(parts ...string) string { return digest(parts...) }
