package pgtest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A freshly cloned database has no statistics, and PostgreSQL plans every statement on it the
// same way; a database that has aged plans differently. A statement whose meaning depends on
// its plan (pgflow-wasm once completed other tasks than its batch's once the planner had
// statistics) passes every test on fresh clones. PlanEnv makes every test database of a run
// look aged, or plan differently, so the suites can be run once per mode:
//
//	PGTEST_PLAN=aged          go test ./host/...   # warm flow of a few hundred tasks, ANALYZEd
//	PGTEST_PLAN=aged,noindex  go test ./host/...   # and no index or bitmap scans, generic plans
//
// The modes apply to every session of the database (ALTER DATABASE ... SET), the worker's
// included.
const PlanEnv = "PGTEST_PLAN"

// Plan modes.
const (
	PlanAged    = "aged"
	PlanNoIndex = "noindex"
)

// planModes reads PlanEnv; an unknown mode is an error, so a typo does not silently test
// nothing.
func planModes() ([]string, error) {
	var modes []string
	for _, m := range strings.Split(os.Getenv(PlanEnv), ",") {
		switch m = strings.TrimSpace(m); m {
		case "":
		case PlanAged, PlanNoIndex:
			modes = append(modes, m)
		default:
			return nil, fmt.Errorf("%s=%q: unknown mode %q (use %s and/or %s)", PlanEnv, os.Getenv(PlanEnv), m, PlanAged, PlanNoIndex)
		}
	}
	slices.Sort(modes)
	return slices.Compact(modes), nil
}

// noIndexSettings push the planner off the plans a fresh database gets.
var noIndexSettings = []string{"enable_indexscan = off", "enable_bitmapscan = off", "plan_cache_mode = force_generic_plan"}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// applyPlanSettings sets the noindex settings on a database, for its future sessions.
func applyPlanSettings(ctx context.Context, admin execer, db string, modes []string) error {
	if !slices.Contains(modes, PlanNoIndex) {
		return nil
	}
	for _, s := range noIndexSettings {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident(db)+" SET "+s); err != nil {
			return err
		}
	}
	return nil
}

// warmVersion changes whenever warm does, so aged templates are rebuilt.
const warmVersion = "1"

// warmWorker is the worker the warm flow's tasks were started by. It is not a pgflow-wasm
// worker, and no test serves the warm flow, so nothing may touch them.
const warmWorker = "00000000-0000-4000-8000-00000000beef"

// warm fills the warm flow with 120 runs of a 3-element map step and a dependent single step,
// leaving tasks completed, failed, queued and started, then ANALYZEs the database: what an
// ordinary database that has run a while looks like to the planner.
func warm(ctx context.Context, conn *pgx.Conn) error {
	q := func(sql string, args ...any) error {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("warming the test database: %s: %w", strings.Fields(sql)[0:min(6, len(strings.Fields(sql)))], err)
		}
		return nil
	}
	// Every call below decides its rows first (a materialized CTE), then calls.
	completeWhere := func(step, cond string, output string) error {
		return q(`with todo as materialized (
			  select st.run_id, st.step_slug, st.task_index from pgflow.step_tasks st join pgflow.runs r on r.run_id = st.run_id
			  where st.flow_slug = $1 and st.step_slug = $2 and st.status = 'started' and `+cond+`
			  order by st.run_id, st.task_index)
			select count(*) from todo, lateral pgflow.complete_task(todo.run_id, todo.step_slug, todo.task_index, `+output+`) c`,
			WarmFlow, step)
	}
	startAll := func() error {
		return q(`with m as materialized (select coalesce(array_agg(msg_id), '{}') ids from pgmq.read($1, 3600, 10000))
			select count(*) from m, lateral pgflow.start_tasks($1, m.ids, $2::uuid) t`, WarmFlow, warmWorker)
	}
	for _, step := range []func() error{
		func() error { return q(`select pgflow.create_flow($1, 1, 0, 60)`, WarmFlow) },
		func() error { return q(`select pgflow.add_step($1, 'root', step_type => 'map')`, WarmFlow) },
		func() error { return q(`select pgflow.add_step($1, 'after', array['root'])`, WarmFlow) },
		func() error {
			return q(`insert into pgflow.workers (worker_id, queue_name, function_name) values ($1::uuid, $2, 'pgtest-warm')`,
				warmWorker, WarmFlow)
		},
		func() error {
			return q(`select count(*) from generate_series(1, 100) i, lateral pgflow.start_flow($1, jsonb_build_array(i, i + 1, i + 2)) r`, WarmFlow)
		},
		startAll,
		// Runs 1-80: the map completes (their 'after' tasks get queued); 81-90: a root task
		// fails for good (max_attempts 1), failing the run; 91-100: root tasks stay started.
		func() error {
			return completeWhere("root", "(r.input->>0)::int <= 80", "to_jsonb(todo.task_index * 10)")
		},
		func() error {
			return q(`with todo as materialized (
				  select st.run_id, st.step_slug, st.task_index from pgflow.step_tasks st join pgflow.runs r on r.run_id = st.run_id
				  where st.flow_slug = $1 and st.step_slug = 'root' and st.task_index = 0 and st.status = 'started'
				    and (r.input->>0)::int between 81 and 90 order by st.run_id)
				select count(*) from todo, lateral pgflow.fail_task(todo.run_id, todo.step_slug, todo.task_index, 'warm failure') f`, WarmFlow)
		},
		startAll,
		// 'after' of runs 1-60 completes; 61-80 stay started.
		func() error { return completeWhere("after", "(r.input->>0)::int <= 60", `'{"warm": true}'::jsonb`) },
		// 20 more runs whose tasks stay queued.
		func() error {
			return q(`select count(*) from generate_series(101, 120) i, lateral pgflow.start_flow($1, jsonb_build_array(i, i + 1, i + 2)) r`, WarmFlow)
		},
		func() error { return q(`analyze`) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// prepare readies a freshly installed database for tests: the audit trigger and, when aged,
// the warm flow. Transitions of the warming are not the test's: they are cleared.
func prepare(ctx context.Context, conn *pgx.Conn, modes []string) error {
	if _, err := conn.Exec(ctx, auditSQL); err != nil {
		return fmt.Errorf("installing the task audit: %w", err)
	}
	if !slices.Contains(modes, PlanAged) {
		return nil
	}
	if err := warm(ctx, conn); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `truncate pgtest_audit.transitions`)
	return err
}
