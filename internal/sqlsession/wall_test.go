package sqlsession_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
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
	h := newHandler(t)
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
				sql := strings.ReplaceAll(attack, "%s", target)
				err := h.run(g, sql)
				if err == nil {
					t.Errorf("%s to %s: the task completed", name, target)
					continue
				}
				if !strings.Contains(err.Error(), "sql: permission denied to set role") || !strings.Contains(err.Error(), "SQLSTATE 42501") {
					t.Errorf("%s to %s: the task failed with %v, want PostgreSQL's refusal to set the role", name, target, err)
				}
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
		if err := h.run(g, sql); err == nil || !strings.Contains(err.Error(), "SQLSTATE 42501") {
			t.Errorf("%s: the task ended with %v, want a permission error", sql, err)
		}
	}
}

// What a task leaves on its session (a session advisory lock, a setting changed through
// pg_settings, a temporary table, a prepared statement, a LISTEN) is gone before the next
// task gets the same connection, whether the task committed or rolled back.
func TestNothingSurvivesATaskOnAPooledSession(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	h := newHandler(t)
	ctx := context.Background()
	for _, transactional := range []bool{false, true} {
		g := a.grant(transactional)
		g.DB = rolePoolOf(t, a.db, a.role, 1) // one connection: the next task gets the same session
		sqlsession.SkipFilter(g)
		s := g.Begin(time.Now().Add(time.Minute))
		pid := mustQuery(t, s, "select pg_backend_pid() as pid")
		s.Close()
		// One task of a real handler leaves all of it behind and completes.
		if err := h.run(g,
			"select pg_advisory_lock(424242)",
			"update pg_settings set setting = 'secret, public' where name = 'search_path'",
			"select 1 as x into temp table leak",
			"prepare leaked as select 1",
			"listen leaked",
		); err != nil {
			t.Fatalf("transactional %v: the leaving task failed: %v", transactional, err)
		}
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

// handler runs statements through a real guest (modules/testdata/sql_call.wasm) in the
// sandbox, as a task does.
type handler struct {
	t *testing.T
	m sandbox.Module
}

func newHandler(t *testing.T) handler {
	t.Helper()
	path := filepath.Join(workertest.RepoRoot(t), "modules/testdata/sql_call.wasm")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: run `make testmodules`", path)
	}
	e := workertest.Engine(t, sandbox.EngineWazero)
	m, err := e.Load(context.Background(), path, sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{Step: `step "s"`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return handler{t: t, m: m}
}

// run runs one task of g whose handler sends the statements; the task's error, or nil.
func (h handler) run(g *sqlsession.Grant, statements ...string) error {
	h.t.Helper()
	type stmt struct {
		SQL string `json:"sql"`
	}
	var in struct {
		Run struct {
			Statements []stmt `json:"statements"`
		} `json:"run"`
	}
	for _, s := range statements {
		in.Run.Statements = append(in.Run.Statements, stmt{SQL: s})
	}
	input, err := json.Marshal(in)
	if err != nil {
		h.t.Fatal(err)
	}
	s := g.Begin(time.Now().Add(time.Minute))
	defer s.Close()
	_, err = h.m.Run(context.Background(), sandbox.Task{Input: input, Context: []byte(`{}`), Timeout: time.Minute, SQL: s})
	return err
}
