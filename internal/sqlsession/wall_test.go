package sqlsession_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
)

// The attacks of the hostile trial, run without the statement filter: the database's wall
// alone holds. Built-ins that run a string as SQL try to switch to the worker's login (a
// superuser and a plain login) or to another step's role, each also switching back before
// the statement ends; every one fails with PostgreSQL's own refusal, because the session
// is logged in as the step's role and was never the login.
func TestStringRunningFunctionsCannotLeaveTheRole(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	other := a.db.Role(t, "other_step", "LOGIN")
	plainLogin := a.db.Role(t, "worker_login", "LOGIN")
	exec(t, a.db.Pool, "grant "+other+" to "+plainLogin) // the old design's membership
	var super string
	if err := a.db.Pool.QueryRow(context.Background(), "select session_user::text").Scan(&super); err != nil {
		t.Fatal(err)
	}
	attacks := map[string]string{
		"query_to_xml":       `select query_to_xml('select set_config(''role'', ''%s'', true)', true, false, '')`,
		"query_to_xmlschema": `select query_to_xml_and_xmlschema('select set_config(''role'', ''%s'', true)', true, false, '')`,
		"ts_stat":            `select * from ts_stat('select to_tsvector(set_config(''role'', ''%s'', true))')`,
		"ts_rewrite":         `select ts_rewrite('a'::tsquery, 'select ''a''::tsquery, set_config(''role'', ''%s'', true)::tsquery')`,
		"switch and back": `select query_to_xml('select set_config(''role'', ''%s'', true), set_config(''role'', ''none'', true)',
			true, false, '')`,
		"nested": `select (select count(*) from (select query_to_xml('select set_config(''role'', ''%s'', true)', true, false, '')) q)`,
	}
	for _, target := range []string{super, plainLogin, other} {
		for name, attack := range attacks {
			for _, transactional := range []bool{false, true} {
				g := a.grant(transactional)
				sqlsession.SkipFilter(g)
				s := g.Begin(time.Now().Add(time.Minute))
				sql := strings.ReplaceAll(attack, "%s", target)
				_, err := query(t, s, sql)
				s.Close()
				if err == nil {
					t.Errorf("%s to %s: the statement ran", name, target)
					continue
				}
				expectCode(t, err, abi.ErrSQLFailed, "42501", "permission denied to set role")
			}
		}
	}
	// And what the trial read and did as the login stays out of reach.
	g := a.grant(false)
	sqlsession.SkipFilter(g)
	for _, sql := range []string{
		"select * from pgflow.runs",
		"select pgflow.start_flow('x', '{}')",
		"select pgmq.purge_queue('x')",
		"select * from secret.keys",
		"select pg_read_file('/etc/passwd')",
		"select lo_export(0, '/tmp/x')",
	} {
		s := g.Begin(time.Now().Add(time.Minute))
		_, err := query(t, s, sql)
		s.Close()
		expectCode(t, err, abi.ErrSQLFailed, "42501")
	}
}

// What a task leaves on its session (a session advisory lock, a setting changed through
// pg_settings, a temporary table, a prepared statement, a LISTEN) is gone before the next
// task gets the same connection, whether the task committed or rolled back.
func TestNothingSurvivesATaskOnAPooledSession(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	for _, transactional := range []bool{false, true} {
		g := a.grant(transactional)
		g.DB = onePool(t, a)
		sqlsession.SkipFilter(g)
		s := g.Begin(time.Now().Add(time.Minute))
		pid := mustQuery(t, s, "select pg_backend_pid() as pid")
		for _, sql := range []string{
			"select pg_advisory_lock(424242)",
			"update pg_settings set setting = 'secret, public' where name = 'search_path'",
			"select 1 as x into temp table leak",
			"prepare leaked as select 1",
			"listen leaked",
		} {
			mustQuery(t, s, sql)
		}
		s.Close()
		var free bool
		if err := a.db.Pool.QueryRow(ctx, "select pg_try_advisory_lock(424242)").Scan(&free); err != nil || !free {
			t.Errorf("transactional %v: the task's advisory lock outlived it (%v)", transactional, err)
		}
		if _, err := a.db.Pool.Exec(ctx, "select pg_advisory_unlock_all()"); err != nil {
			t.Fatal(err)
		}
		s = g.Begin(time.Now().Add(time.Minute))
		if got := mustQuery(t, s, "select pg_backend_pid() as pid"); got != pid {
			t.Fatalf("transactional %v: the next task got another session (%s, %s): the test proves nothing", transactional, pid, got)
		}
		got := mustQuery(t, s, `select current_setting('search_path') as path,
			(select count(*) from pg_prepared_statements) as prepared,
			(select count(*) from pg_listening_channels()) as listening,
			to_regclass('leak') is null as no_temp`)
		want := `{"columns":["path","prepared","listening","no_temp"],"rows":[["\"$user\", public",0,0,true]],"row_count":1,"command":"SELECT 1"}`
		if got != want {
			t.Errorf("transactional %v: the next task saw %s, want %s", transactional, got, want)
		}
		s.Close()
	}
}

// onePool is a pool of one connection logged in as a's role: the next task gets the same
// session.
func onePool(t *testing.T, a app) *pgxpool.Pool {
	t.Helper()
	cfg, err := sqlsession.RolePoolConfig(a.db.Pool.Config(), a.role, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
