package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// TaskRecord is one task as replay needs it: its step, what pgflow recorded of its last
// attempt, and its whole input rebuilt as the worker received it.
type TaskRecord struct {
	RunID     string
	FlowSlug  string
	Step      Step // Slug, Type and DependsOn only
	Index     int
	Status    string
	Attempts  int
	Error     string
	WorkerID  string // the worker that ran the last attempt, "" if none did
	MsgID     int64
	Input     json.RawMessage // the handler's input (ABI v1: a single step's has "run")
	FlowInput json.RawMessage // the run's input
	// Timeout is the step's effective timeout as pgflow stores it: the step's, else the flow's.
	Timeout time.Duration
}

// Task reads task index of step of run id, whole. A step whose task does not exist (yet)
// gets an error that says which tasks it has, or which steps the run has.
func (s *Store) Task(ctx context.Context, id, step string, index int) (TaskRecord, error) {
	runID, err := ParseRunID(id)
	if err != nil {
		return TaskRecord{}, err
	}
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		return TaskRecord{}, err
	}
	if len(steps) == 0 {
		return TaskRecord{}, fmt.Errorf("run %s: %w", runID, ErrNotFound)
	}
	var def *Step
	var slugs []string
	for i := range steps {
		slugs = append(slugs, steps[i].Slug)
		if steps[i].Slug == step {
			def = &steps[i]
		}
	}
	if def == nil {
		return TaskRecord{}, fmt.Errorf("run %s has no step %q: its steps are %s", runID, step, strings.Join(slugs, ", "))
	}
	r := TaskRecord{RunID: runID, Step: Step{Slug: def.Slug, Type: def.Type, DependsOn: def.DependsOn}, Index: index}
	var input, flowInput *string
	var timeout int
	err = s.pool.QueryRow(ctx, `select t.flow_slug, t.status, t.attempts_count, coalesce(t.error_message, ''),
		       coalesce(t.last_worker_id::text, ''), coalesce(t.message_id, 0), (`+inputExpr(*def)+`)::text,
		       (select r.input::text from pgflow.runs r where r.run_id = t.run_id),
		       (select coalesce(st.opt_timeout, f.opt_timeout) from pgflow.steps st join pgflow.flows f using (flow_slug)
		        where st.flow_slug = t.flow_slug and st.step_slug = t.step_slug)
		from pgflow.step_tasks t
		where t.run_id = $1::uuid and t.step_slug = $2 and t.task_index = $3`, runID, step, index).
		Scan(&r.FlowSlug, &r.Status, &r.Attempts, &r.Error, &r.WorkerID, &r.MsgID, &input, &flowInput, &timeout)
	if errors.Is(err, pgx.ErrNoRows) {
		n := def.TaskCount()
		if n == 0 {
			return TaskRecord{}, fmt.Errorf("step %q of run %s has no tasks yet (the step is %s): %w", step, runID, def.Status, ErrNotFound)
		}
		return TaskRecord{}, fmt.Errorf("step %q of run %s has tasks 0 to %d, not %d: %w", step, runID, n-1, index, ErrNotFound)
	}
	if err != nil {
		return TaskRecord{}, err
	}
	if input != nil {
		r.Input = json.RawMessage(*input)
	} else {
		r.Input = json.RawMessage("null")
	}
	if flowInput != nil {
		r.FlowInput = json.RawMessage(*flowInput)
	}
	r.Timeout = time.Duration(timeout) * time.Second
	return r, nil
}
