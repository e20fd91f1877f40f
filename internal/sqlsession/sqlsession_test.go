package sqlsession_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/sqlcap"
)

// app is a test database with the application's side of things (pgtest.DB.Ledger).
type app struct {
	db   *pgtest.DB
	role string
	pool *pgxpool.Pool // logged in as role
}

func newApp(t *testing.T) app { return newAppB(t) }

func newAppB(t testing.TB) app {
	t.Helper()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	return app{db: db, role: role, pool: rolePool(t, db, role)}
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// rolePool is a pool logged in as role, as the worker opens one (sqlsession.RolePoolConfig).
func rolePool(t testing.TB, db *pgtest.DB, role string) *pgxpool.Pool {
	return rolePoolOf(t, db, role, 4)
}

// rolePoolOf is rolePool with conns connections at most.
func rolePoolOf(t testing.TB, db *pgtest.DB, role string, conns int) *pgxpool.Pool {
	t.Helper()
	cfg, err := sqlsession.RolePoolConfig(db.Pool.Config(), role, "", conns)
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

func (a app) grant(transactional bool) *sqlsession.Grant {
	return &sqlsession.Grant{Where: `step "s" of flow "f" (flows.yaml:3)`, Role: a.role, Transactional: transactional, DB: a.pool}
}

func query(t *testing.T, s *sqlsession.Session, sql string, params ...any) ([]byte, error) {
	t.Helper()
	req, err := json.Marshal(map[string]any{"sql": sql, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Query(ctx, req)
}

func mustQuery(t *testing.T, s *sqlsession.Session, sql string, params ...any) string {
	t.Helper()
	out, err := query(t, s, sql, params...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return string(out)
}

func TestTheRoleInsertsAndReadsBack(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	s := a.grant(false).Begin(time.Now().Add(time.Minute))
	defer s.Close()
	const run = "8f7d1c2e-0000-4000-8000-000000000001"
	if got := mustQuery(t, s, "insert into app.ledger (run_id, task_index, amount) values ($1, $2, $3)", run, 0, 42); got !=
		`{"columns":[],"rows":[],"row_count":1,"command":"INSERT 0 1"}` {
		t.Fatalf("insert: %s", got)
	}
	got := mustQuery(t, s, "select run_id, task_index, amount, sum(amount) over () as total from app.ledger where run_id = $1", run)
	if got != `{"columns":["run_id","task_index","amount","total"],"rows":[["`+run+`",0,42,42]],"row_count":1,"command":"SELECT 1"}` {
		t.Fatalf("select: %s", got)
	}
	// Each statement committed on its own: another session sees the row.
	if n := count(t, a.db.Pool, "select count(*) from app.ledger"); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

func TestValuesKeepTheirJSONTypes(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	s := a.grant(false).Begin(time.Now().Add(time.Minute))
	defer s.Close()
	got := mustQuery(t, s, `select 1::int2, 2::int4, 9007199254740993::int8, 123456789012345678901234567890.10::numeric,
		0.1::float8, 'NaN'::float8, '-Infinity'::numeric, true, false, null::int, '{"a": [1, "x"]}'::jsonb, '[1,2]'::json,
		'it''s "quoted"'::text, '2024-02-29'::date, array[1,2], '\x00ff'::bytea, $1::text, $2::jsonb, $3::numeric`,
		"param", map[string]any{"k": true}, json.Number("0.30000000000000004"))
	var v struct {
		Rows [][]json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal([]byte(got), &v); err != nil || len(v.Rows) != 1 {
		t.Fatalf("%s: %v", got, err)
	}
	want := []string{`1`, `2`, `9007199254740993`, `123456789012345678901234567890.10`, `0.1`, `"NaN"`, `"-Infinity"`,
		`true`, `false`, `null`, `{"a": [1, "x"]}`, `[1,2]`, `"it's \"quoted\""`, `"2024-02-29"`, `"{1,2}"`, `"\\x00ff"`,
		`"param"`, `{"k": true}`, `0.30000000000000004`}
	for i, w := range want {
		if string(v.Rows[0][i]) != w {
			t.Errorf("column %d = %s, want %s", i+1, v.Rows[0][i], w)
		}
	}
}

// expectCode checks that a request failed with an error code for the guest.
func expectCode(t *testing.T, err error, code int32, sqlstate string, parts ...string) {
	t.Helper()
	var e *sqlcap.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an error code %d", err, err, code)
	}
	if e.Code != code || e.SQLState != sqlstate {
		t.Fatalf("error %d %s %q, want code %d, SQLSTATE %q", e.Code, e.SQLState, e.Message, code, sqlstate)
	}
	for _, p := range parts {
		if !strings.Contains(e.Message, p) {
			t.Fatalf("error %q lacks %q", e.Message, p)
		}
	}
}

func expectAbort(t *testing.T, err error, reason string, parts ...string) {
	t.Helper()
	var a *sqlcap.Abort
	if !errors.As(err, &a) || a.Reason != reason {
		t.Fatalf("error %v (%T), want an abort %q", err, err, reason)
	}
	for _, p := range parts {
		if !strings.Contains(a.Message, p) {
			t.Fatalf("abort %q lacks %q", a.Message, p)
		}
	}
}

// Every way out of the role fails with its own error; nothing is written and the session
// (or a new one) goes on working.
func TestTheWall(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	for _, transactional := range []bool{false, true} {
		name := "own transactions"
		if transactional {
			name = "one transaction"
		}
		t.Run(name, func(t *testing.T) {
			g := a.grant(transactional)
			g.StatementTimeout = 300 * time.Millisecond
			g.MaxRows = 1000
			g.MaxResultBytes = 64 << 10
			fresh := func() *sqlsession.Session {
				s := g.Begin(time.Now().Add(time.Minute))
				t.Cleanup(s.Close)
				return s
			}
			_, err := query(t, fresh(), "select * from pgflow.runs")
			expectCode(t, err, abi.ErrSQLFailed, "42501", "sql: permission denied for schema pgflow (SQLSTATE 42501)")
			_, err = query(t, fresh(), "select * from secret.keys")
			expectCode(t, err, abi.ErrSQLFailed, "42501", "permission denied for schema secret")
			_, err = query(t, fresh(), "select pg_read_file('/etc/passwd')")
			expectCode(t, err, abi.ErrSQLRefused, "", "calling pg_read_file is not allowed")
			_, err = query(t, fresh(), "set role postgres")
			expectCode(t, err, abi.ErrSQLRefused, "", "SET statements are not allowed")
			_, err = query(t, fresh(), "reset role")
			expectCode(t, err, abi.ErrSQLRefused, "", "RESET statements are not allowed")
			_, err = query(t, fresh(), "select 1; select 2")
			expectCode(t, err, abi.ErrSQLRefused, "", "one statement per call")
			_, err = query(t, fresh(), "copy (select 1) to program 'id'")
			expectCode(t, err, abi.ErrSQLRefused, "", "COPY statements are not allowed")
			start := time.Now()
			_, err = query(t, fresh(), "select pg_sleep(600)")
			expectCode(t, err, abi.ErrSQLFailed, "57014", "canceling statement due to statement timeout")
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("pg_sleep(600) took %s to stop", took)
			}
			start = time.Now()
			_, err = query(t, fresh(), "select generate_series(1, 10000000)")
			expectAbort(t, err, "max_rows", "more than the 1000 rows of its sql.max_rows", `step "s" of flow "f" (flows.yaml:3)`)
			t.Logf("10 million rows refused after %s", time.Since(start))
			_, err = query(t, fresh(), "select repeat('x', 100000)")
			expectAbort(t, err, "max_result_bytes", "over the 64 KiB of its sql.max_result_bytes")
			// A function that changes the role: the statement's insert is rolled back with it.
			_, err = query(t, fresh(), "with i as (insert into app.ledger values (gen_random_uuid(), 0, 1) returning 1) select app.become('none') from i")
			expectAbort(t, err, "role_changed", "changed who it runs as", `role "none"`)
			// Nothing of the above was written, and the role still works.
			if n := count(t, a.db.Pool, "select count(*) from app.ledger"); n != 0 {
				t.Fatalf("%d rows written", n)
			}
			s := fresh()
			mustQuery(t, s, "insert into app.ledger values (gen_random_uuid(), 1, 5)")
			s.Close()
			want := 1
			if transactional {
				want = 0 // closed without a completion: rolled back
			}
			if n := count(t, a.db.Pool, "select count(*) from app.ledger"); n != want {
				t.Fatalf("%d rows after the last insert, want %d", n, want)
			}
			exec(t, a.db.Pool, "truncate app.ledger")
		})
	}
}

// In a transactional step a failed statement aborts the task's transaction: later
// statements say so, and the session reports it.
func TestAFailedStatementAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	s := a.grant(true).Begin(time.Now().Add(time.Minute))
	defer s.Close()
	mustQuery(t, s, "insert into app.ledger values (gen_random_uuid(), 0, 1)")
	_, err := query(t, s, "insert into app.ledger values ($1, 0, 1)", "not a uuid: s3cr3t")
	expectCode(t, err, abi.ErrSQLFailed, "22P02", `invalid input syntax for type uuid: "$1"`)
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("the message repeats the parameter: %v", err)
	}
	_, err = query(t, s, "select 1")
	expectCode(t, err, abi.ErrSQLFailed, "25P02", "the task's transaction is aborted", "invalid input syntax for type uuid")
	if !s.Open() || s.Failed() == nil {
		t.Fatalf("open %v, failed %v", s.Open(), s.Failed())
	}
}

func TestCheckRole(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	login := a.db.Role(t, "worker_login", "LOGIN")
	admin := a.db.PoolAs(t, login)
	super := a.db.Role(t, "super", "LOGIN SUPERUSER")
	bypass := a.db.Role(t, "bypass", "LOGIN BYPASSRLS")
	creator := a.db.Role(t, "creator", "LOGIN CREATEROLE")
	nologin := a.db.Role(t, "nologin", "NOLOGIN")
	member := a.db.Role(t, "member", "LOGIN")
	exec(t, a.db.Pool, "grant "+login+" to "+member)
	check := func(role string, allow bool) error {
		_, err := sqlsession.CheckRole(ctx, admin, rolePool(t, a.db, role), role, "", allow)
		return err
	}
	if rc, err := sqlsession.CheckRole(ctx, admin, a.pool, a.role, "", false); err != nil || rc.Login != login {
		t.Fatalf("%+v %v", rc, err)
	}
	for _, c := range []struct {
		role  string
		allow bool
		want  string
	}{
		{"no_such_role_x", false, `role "no_such_role_x" does not exist: create it`},
		{strings.ToUpper(a.role), false, `(role names are exact: did you mean "` + a.role + `"?)`},
		{super, false, "is a superuser"},
		{bypass, false, "bypasses row-level security (BYPASSRLS)"},
		{creator, false, "may create roles (CREATEROLE)"},
		{nologin, false, `role "` + nologin + `" cannot log in`},
		{nologin, true, `ALTER ROLE ` + nologin + ` LOGIN PASSWORD`},
		{login, true, "is the worker's own login"},
		{member, true, "is a member of the worker's login"},
	} {
		if err := check(c.role, c.allow); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckRole(%s) = %v, want %q", c.role, err, c.want)
		}
	}
	for _, r := range []string{super, bypass, creator} {
		if err := check(r, true); err != nil {
			t.Errorf("CheckRole(%s, allowed) = %v", r, err)
		}
	}
}
