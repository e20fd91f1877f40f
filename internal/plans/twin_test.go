package plans_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-wasm/pgflow-wasm/internal/plans"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// On every release whose start_tasks is SQL, the twin starts the same tasks with the same
// inputs and leaves step_tasks and the queue as pgflow's own does: root, map and dependent
// steps, called on the same messages in two transactions rolled back. From 0.17, whose
// start_tasks is PL/pgSQL, there is no twin and fetches call pgflow's.
func TestTheTwinDoesWhatPgflowsStartTasksDoesOnEveryRelease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		release string
		files   int
		main    bool // the files are the first of pgflow's main, else of 0.14.1
		twin    bool
	}{
		{"0.8.1", 12, false, true},
		{"0.12.0", 16, false, true},
		{"0.14.1", 20, false, true},
		{"0.15.0", 21, true, true},
		{"0.15.1", 22, true, true},
		{"0.16.0", 23, true, true},
		{"0.17.0", 24, true, false},
	} {
		t.Run(c.release, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := ""
			if c.main {
				dir = pgtest.PgflowMainRelease(t, c.files)
			} else {
				dir = pgtest.PgflowRelease(t, c.files)
			}
			db := pgtest.NewDB(t, pgtest.Empty())
			conn := db.Conn(t)
			if _, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: dir, Layer: schema.LayerSchema}); err != nil {
				t.Fatal(err)
			}
			got, why := plans.TwinSchema(ctx, conn)
			if !c.twin {
				if got != "pgflow" || why == nil || !strings.Contains(why.Error(), "plpgsql") {
					t.Fatalf("Schema = %q, %v; want pgflow, because start_tasks is plpgsql", got, why)
				}
				return
			}
			if got != "pg_temp" || why != nil {
				t.Fatalf("Schema = %q, %v; want pg_temp", got, why)
			}
			exec(t, conn, `select pgflow.create_flow('f')`,
				`select pgflow.add_step('f', 'a')`,
				`select pgflow.add_step('f', 'm', step_type => 'map')`,
				`select pgflow.add_step('f', 'b', array['a', 'm'])`,
				`insert into pgflow.workers (worker_id, queue_name, function_name) values ('00000000-0000-4000-8000-000000000001', 'f', 'test')`,
				`select count(*) from generate_series(1, 3) g, lateral pgflow.start_flow('f', jsonb_build_array(g, g * 10, 'x'))`)
			// The root steps' messages (a's, and m's three elements per run), then b's, once a and
			// m are completed (by pgflow's own functions, outside the comparison).
			compare(t, conn, "the root and map steps")
			exec(t, conn, `select count(*) from `+call("pgflow", `(select array_agg(msg_id) from pgmq.q_f)`))
			exec(t, conn, `select count(*) from pgflow.step_tasks st,
				lateral pgflow.complete_task(st.run_id, st.step_slug, st.task_index,
					case st.step_slug when 'a' then '{"a": 1}' else to_jsonb(st.task_index) end)
				where st.status = 'started'`)
			compare(t, conn, "a step with a map and a single dependency")
		})
	}
}

// call is start_tasks in schema on the messages of ids, an SQL expression, by the test worker.
func call(schema, ids string) string {
	return fmt.Sprintf("%s.start_tasks('f', %s, '00000000-0000-4000-8000-000000000001')", schema, ids)
}

// compare calls pgflow's start_tasks and the twin on the queued messages, each in a
// transaction it rolls back, and fails where their rows or effects differ.
func compare(t *testing.T, conn *pgx.Conn, what string) {
	t.Helper()
	pgflows, twins := effects(t, conn, "pgflow"), effects(t, conn, "pg_temp")
	if pgflows[0] == "" {
		t.Fatalf("%s: start_tasks started nothing", what)
	}
	for i, name := range []string{"rows returned", "step_tasks", "queue"} {
		if pgflows[i] != twins[i] {
			t.Errorf("%s: the twin's %s differ from pgflow's:\npgflow: %s\ntwin:   %s", what, name, pgflows[i], twins[i])
		}
	}
}

// effects is what start_tasks in schema returns and leaves (tasks and messages), as text.
func effects(t *testing.T, conn *pgx.Conn, schema string) [3]string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var out [3]string
	for i, q := range []string{
		`select coalesce(string_agg(to_jsonb(r)::text, e'\n' order by r.msg_id), '') from ` +
			call(schema, `(select array_agg(msg_id) from pgmq.q_f)`) + ` r`,
		// started_at is now(), another instant in each transaction.
		`select string_agg((to_jsonb(st) - 'started_at')::text || ' started ' || (st.started_at is not null)::text, e'\n'
			order by st.run_id, st.step_slug, st.task_index) from pgflow.step_tasks st`,
		// A message's vt is set from the clock: compared to the second.
		`select string_agg(format('%s read %s hidden for %ss', msg_id, read_ct, round(extract(epoch from vt - now()))), e'\n'
			order by msg_id) from pgmq.q_f`,
	} {
		if err := tx.QueryRow(ctx, q).Scan(&out[i]); err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
	}
	return out
}

func exec(t *testing.T, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// A session that may not create temporary objects calls pgflow's start_tasks, and says why
// once: the connection is not asked again.
func TestWithoutTemporaryObjectsFetchesCallPgflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	role := db.Role(t, "notemp", "LOGIN")
	exec(t, db.Conn(t), fmt.Sprintf(`revoke temporary on database %s from public`, pgx.Identifier{db.Name}.Sanitize()),
		fmt.Sprintf(`grant usage on schema pgflow to %s`, pgx.Identifier{role}.Sanitize()))
	conn, err := pgx.Connect(ctx, db.URLAs(t, role))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	got, why := plans.TwinSchema(ctx, conn)
	if got != "pgflow" || why == nil || !strings.Contains(why.Error(), "permission denied to create temporary tables") {
		t.Fatalf("Schema = %q, %v; want pgflow, for want of the TEMPORARY privilege", got, why)
	}
	if got, why = plans.TwinSchema(ctx, conn); got != "pgflow" || why != nil {
		t.Errorf("asked again: Schema = %q, %v; want pgflow and no second attempt", got, why)
	}
}

// Once pgflow's start_tasks is replaced (an upgrade under a serving worker), a session's twin
// of it refuses to run, with plans.StaleSQLState, rather than run the old body.
func TestATwinRefusesToRunOnceItsOriginalChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	conn := db.Conn(t)
	if got, why := plans.TwinSchema(ctx, conn); got != "pg_temp" {
		t.Skipf("this database's start_tasks has no twin (%v)", why)
	}
	exec(t, conn, `select count(*) from pg_temp.start_tasks('f', '{}'::bigint[], null::uuid)`)
	var def string
	if err := conn.QueryRow(ctx, `select pg_get_functiondef(p.oid) from pg_proc p
		where p.pronamespace = 'pgflow'::regnamespace and p.proname = 'start_tasks' limit 1`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	exec(t, conn, def) // CREATE OR REPLACE: the same body, a new version of the row
	_, err := conn.Exec(ctx, `select count(*) from pg_temp.start_tasks('f', '{}'::bigint[], null::uuid)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != plans.StaleSQLState || !strings.Contains(pgErr.Message, "has changed") {
		t.Fatalf("the twin of a replaced start_tasks: %v, want SQLSTATE %s saying the original changed", err, plans.StaleSQLState)
	}
}
