//go:build !cgo

package sqlcap

import (
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

func TestTextFilterLetsRowStatementsThrough(t *testing.T) {
	for _, sql := range []string{
		"select 1",
		"SELECT * FROM app.ledger WHERE run_id = $1",
		"  -- a comment\n /* and /* a nested */ one */ insert into app.ledger values ($1, $2, $3)",
		"((select 1))",
		"with t as (select 1) select * from t;",
		"with t as (insert into a values (1) returning *) select * from t",
		"update a set b = 'set_config(''role'', ''x'', true)' where c = $1",
		"delete from a where b = E'it\\'s; set_config('",
		"values (1), (2)",
		"table app.ledger",
		"merge into a using b on a.id = b.id when matched then update set v = b.v",
		"select $$ pg_read_file('/etc/passwd') $$, $tag$ ; select 2 $tag$",
		`select "set_config" from t`, // a column, not a call
		"select count(*) from t -- set_config(",
		"select 1;  -- trailing comment",
		"select 1; /* trailing */ \n",
		"select x'ff', b'01', n'text', u&'d\\0061t\\+000061'",
		"select now() at time zone 'utc', 1.5e3, .5, $1::jsonb",
		"select a$b from t",
	} {
		if err := Check(sql); err != nil {
			t.Errorf("Check(%q) = %v, want nil", sql, err)
		}
	}
}

func TestTextFilterRefuses(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"set role postgres", "SET statements are not allowed"},
		{"reset role", "RESET statements are not allowed"},
		{"SET SESSION AUTHORIZATION postgres", "SET statements are not allowed"},
		{"begin", "BEGIN statements are not allowed"},
		{"commit", "COMMIT statements are not allowed"},
		{"copy (select 1) to program 'id'", "COPY statements are not allowed"},
		{"listen x", "LISTEN statements are not allowed"},
		{"notify x", "NOTIFY statements are not allowed"},
		{"do $$ begin end $$", "DO statements are not allowed"},
		{"call p()", "CALL statements are not allowed"},
		{"/* c */ ( create table x ()", "CREATE statements are not allowed"},
		{`"select" 1`, `SELECT statements are not allowed`},
		{"select 1\x00; select pg_read_file('x')", "the statement contains a NUL byte"},
		{"", "the statement is empty"},
		{"  -- only a comment", "the statement is empty"},
		{"select 1; select 2", "one statement per call"},
		{"select 1;;", "one statement per call"},
		{"select set_config('role', 'postgres', false)", "calling set_config is not allowed"},
		{"select pg_catalog.SET_CONFIG ('role', 'x', true)", "calling set_config is not allowed"},
		{`select pg_catalog."set_config"('role', 'x', true)`, "calling set_config is not allowed"},
		{"select set_config /* hidden */ ('role', 'x', true)", "calling set_config is not allowed"},
		{"select pg_read_file('/etc/passwd')", "calling pg_read_file is not allowed"},
		{"select pg_read_binary_file('x')", "calling pg_read_binary_file is not allowed"},
		{"select * from pg_ls_dir('.')", "calling pg_ls_dir is not allowed"},
		{"select lo_import('/etc/passwd')", "calling lo_import is not allowed"},
		{"select lo_export(1, '/tmp/x')", "calling lo_export is not allowed"},
		{"select query_to_xml('set role postgres', true, true, '')", "calling query_to_xml is not allowed"},
		{"select dblink_exec('x', 'y')", "calling dblink_exec is not allowed"},
		{"select pg_advisory_lock(1)", "calling pg_advisory_lock is not allowed"},
		{"select pg_try_advisory_xact_lock(1)", "calling pg_try_advisory_xact_lock is not allowed"},
		{"select pg_notify('pgflow:run:x', '{}')", "calling pg_notify is not allowed"},
		{"select pg_terminate_backend(1)", "calling pg_terminate_backend is not allowed"},
		{"select * from ts_stat('select v from t')", "calling ts_stat is not allowed: it runs a string as SQL"},
		{"select ts_rewrite(q, 'select a, b from aliases') from t", "calling ts_rewrite is not allowed"},
		{"select cursor_to_xml('c', 1, true, true, '')", "calling cursor_to_xml is not allowed"},
		{"select 1set_config('role', 'x', true)", "calling set_config is not allowed"},
		{"select 'it''s' || e'\\'', set_config('role', 'x', true)", "calling set_config is not allowed"},
		{`select U&"\0073et_config"('role', 'x', true)`, "Unicode-escaped identifiers"},
		{"select 'unterminated", "unterminated string constant"},
		{"select $x$ unterminated", "unterminated dollar-quoted string"},
		{"select 1 /* unterminated", "unterminated comment"},
		{`select "unterminated`, "unterminated quoted identifier"},
		{"select E'\\' ; select 2", "unterminated string constant"},
	} {
		err := Check(c.sql)
		if err == nil {
			t.Errorf("Check(%q) = nil, want %q", c.sql, c.want)
			continue
		}
		if err.Code != abi.ErrSQLRefused || !strings.HasPrefix(err.Message, "sql: ") || !strings.Contains(err.Message, c.want) {
			t.Errorf("Check(%q) = %d %q, want code %d and %q", c.sql, err.Code, err.Message, abi.ErrSQLRefused, c.want)
		}
	}
}
