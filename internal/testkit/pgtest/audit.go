package pgtest

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
)

// Every test database records each change of a task's status (audit.sql), and when the test
// ends audit checks what a worker must never do, whatever the test itself asserted:
//
//   - complete a task twice;
//   - write into the tasks of the warm flow (PlanAged), which no test serves;
//   - store an output that is not its own task's: a handler that echoes its context and
//     input (modules/testdata/oracle.c) lets the audit check, for every task it ran, that
//     the context names this task and this attempt and that the input is what pgflow
//     builds for it from the run input and the outputs of its dependencies.

//go:embed audit.sql
var auditSQL string

// WarmFlow is the flow that PlanAged fills with tasks in every state; no test serves it.
const WarmFlow = "pgtest_warm"

// oracleSQL gives, for every completed task whose output has the oracle's shape, the
// input pgflow 0.8.1 builds for it (and pgflow-wasm rebuilds on newer pgflow): the element
// for a map step; {"run": run input, <dep>: <dep output>...} for a single step, with only
// the completed dependencies. A map step's output is the array of its tasks' outputs.
const oracleSQL = `
with task as (
  select st.flow_slug, st.run_id, st.step_slug, st.task_index, st.attempts_count, st.last_worker_id, st.output,
         case when s.step_type = 'map' then
                case when not exists (select 1 from pgflow.deps d where d.flow_slug = st.flow_slug and d.step_slug = st.step_slug)
                     then r.input -> st.task_index
                     else (select o.output -> st.task_index from pgflow.deps d cross join lateral (` + depOutputSQL + `) o
                           where d.flow_slug = st.flow_slug and d.step_slug = st.step_slug)
                end
              else jsonb_build_object('run', r.input) ||
                   coalesce((select jsonb_object_agg(d.dep_slug, o.output) from pgflow.deps d cross join lateral (` + depOutputSQL + `) o
                             where d.flow_slug = st.flow_slug and d.step_slug = st.step_slug), '{}'::jsonb)
         end as expected
  from pgflow.step_tasks st
  join pgflow.runs r on r.run_id = st.run_id
  join pgflow.steps s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
  where st.status = 'completed' and jsonb_typeof(st.output) = 'object'
    and st.output ? 'context' and st.output ? 'input' and st.output->'context' ? 'run_id'
)
select count(*) over (),
       flow_slug || ' run ' || run_id || ' step ' || step_slug || '[' || task_index || ']: ' ||
       case
         when output->'context'->>'run_id' <> run_id::text or output->'context'->>'step_slug' <> step_slug
              or (output->'context'->>'task_index')::int <> task_index
           then 'stored the output of another task (' || (output->'context'->>'run_id') || ' ' ||
                (output->'context'->>'step_slug') || '[' || (output->'context'->>'task_index') || '])'
         when (output->'context'->>'attempt')::int <> attempts_count
              or (output->'context'->>'worker_id') is distinct from last_worker_id::text
           then 'stored the output of a superseded attempt (' || (output->'context'->>'attempt') || ' by ' ||
                (output->'context'->>'worker_id') || '; the task is at attempt ' || attempts_count || ' by ' ||
                coalesce(last_worker_id::text, 'nobody') || ')'
         when output->'input' is distinct from expected
           then 'the handler got input ' || left((output->'input')::text, 200) || ', pgflow builds ' ||
                coalesce(left(expected::text, 200), 'nothing')
       end as problem
from task`

// depOutputSQL is the output of dependency d.dep_slug of task st's run, as pgflow passes it
// on (a map's as the array of its tasks' outputs), when that step completed; no row when it
// did not. Looked up by the keys of step_states and step_tasks for each task, so the oracle
// stays linear in the tasks (a shared table of every step's output was scanned per task:
// a minute for 25,000 tasks).
const depOutputSQL = `
  select case when ds.step_type = 'map'
              then coalesce((select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
                             where t.run_id = ss.run_id and t.step_slug = ss.step_slug), '[]'::jsonb)
              else (select t.output from pgflow.step_tasks t
                    where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.task_index = 0)
         end as output
  from pgflow.step_states ss
  join pgflow.steps ds on ds.flow_slug = ss.flow_slug and ds.step_slug = ss.step_slug
  where ss.run_id = st.run_id and ss.step_slug = d.dep_slug and ss.status = 'completed'`

// AuditReport is what the audit found.
type AuditReport struct {
	OracleTasks      int      // completed tasks whose output the oracle checked
	Transitions      int      // status changes recorded
	DoubleCompletion []string // tasks completed more than once
	WarmWrites       []string // changes to the warm flow's tasks
	WrongOutputs     []string // oracle mismatches (another task's output, a stale attempt, a wrong input)
}

// Problems lists every finding, one line each.
func (r AuditReport) Problems() []string {
	var out []string
	out = append(out, r.DoubleCompletion...)
	out = append(out, r.WarmWrites...)
	out = append(out, r.WrongOutputs...)
	return out
}

// Audit checks the database now (see above). Tests may call it themselves to assert on the
// counts; every test database is audited again when its test ends.
func (db *DB) Audit(ctx context.Context) (AuditReport, error) {
	var r AuditReport
	var pgflow, trigger bool
	if err := db.Pool.QueryRow(ctx, `select to_regclass('pgflow.step_tasks') is not null, to_regclass('pgtest_audit.transitions') is not null`).
		Scan(&pgflow, &trigger); err != nil || !pgflow {
		return r, err
	}
	var err error
	if trigger {
		if r, err = db.auditTransitions(ctx); err != nil {
			return r, err
		}
	}
	rows, err := db.Pool.Query(ctx, oracleSQL)
	if err != nil {
		return r, fmt.Errorf("oracle: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var problem *string
		if err := rows.Scan(&r.OracleTasks, &problem); err != nil {
			return r, err
		}
		if problem != nil && len(r.WrongOutputs) < 20 {
			r.WrongOutputs = append(r.WrongOutputs, *problem)
		}
	}
	return r, rows.Err()
}

// auditTransitions checks what the audit trigger recorded (a database pgtest installed; one
// installed by the binary under test has outputs to check, but no trigger).
func (db *DB) auditTransitions(ctx context.Context) (AuditReport, error) {
	var r AuditReport
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgtest_audit.transitions`).Scan(&r.Transitions); err != nil {
		return r, err
	}
	var err error
	if r.DoubleCompletion, err = lines(ctx, db, `
		select flow_slug || ' run ' || run_id || ' step ' || step_slug || '[' || task_index || '] completed ' || count(*) || ' times'
		from pgtest_audit.transitions where new_status = 'completed'
		group by flow_slug, run_id, step_slug, task_index having count(*) > 1`); err != nil {
		return r, err
	}
	if r.WarmWrites, err = lines(ctx, db, `
		select 'the warm flow''s task ' || run_id || ' ' || step_slug || '[' || task_index || '] went from ' ||
		       old_status || ' to ' || new_status
		from pgtest_audit.transitions where flow_slug = $1 order by id limit 20`, WarmFlow); err != nil {
		return r, err
	}
	return r, nil
}

func lines(ctx context.Context, db *DB, sql string, args ...any) ([]string, error) {
	rows, err := db.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// auditAtEnd fails the test when the audit finds a problem. The workers of the test have
// stopped by then (their cleanups were registered later, so they ran first).
func auditAtEnd(t testing.TB, db *DB) {
	t.Cleanup(func() {
		if db.Pool == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := db.Audit(ctx)
		if err != nil && dberr.Transient(err) {
			t.Logf("pgtest: no audit of %s: its server is not reachable (%v)", db.Name, err)
			return
		}
		if err != nil {
			t.Errorf("pgtest: audit of %s: %v", db.Name, err)
			return
		}
		if p := r.Problems(); len(p) > 0 {
			t.Errorf("pgtest: the task audit of %s found %d problems:\n  %s", db.Name, len(p), strings.Join(p, "\n  "))
		}
	})
}
