//go:build cgo

package sqlcap

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

func TestCheckLetsRowStatementsThrough(t *testing.T) {
	t.Parallel()
	for _, sql := range []string{
		"select 1",
		"SELECT * FROM app.ledger WHERE run_id = $1",
		"  -- a comment\n /* and /* a nested */ one */ insert into app.ledger values ($1, $2, $3)",
		"((select 1))",
		"with t as (select 1) select * from t;",
		"with t as (insert into a values (1) returning *) select * from t",
		"with d as (delete from app.queue where id = $1 returning *) insert into app.archive select * from d",
		"insert into app.ledger (run_id, amount) values ($1, $2) returning *",
		"insert into app.ledger values ($1, $2) on conflict (run_id) do update set amount = excluded.amount",
		"update a set b = 'set_config(''role'', ''x'', true)' where c = $1",
		"delete from a where b = E'it\\'s; set_config('",
		"values (1), (2)",
		"table app.ledger",
		"merge into a using b on a.id = b.id when matched then update set v = b.v",
		"merge into app.t using (select $1::int as id) s on t.id = s.id when not matched then insert values (s.id)",
		"select $$ pg_read_file('/etc/passwd') $$, $tag$ ; select 2 $tag$",
		`select "set_config" from t`, // a column, not a call
		"select count(*) from t -- set_config(",
		"select 1;  -- trailing comment",
		"select 1; /* trailing */ \n",
		"select 1 /* ; */ ;",
		"select 1; -- ; and more",
		"select x'ff', b'01', n'text', u&'d\\0061t\\+000061'",
		"select now() at time zone 'utc', 1.5e3, .5, $1::jsonb",
		"select a$b from t",
		"select 'ts_stat(''select 1'')' as note, 'query_to_xml' from app.t where note like '%ts_stat%'",
		"select * from app.jobs where id = $1 for update skip locked",
		"select * from app.t, lateral (select * from app.u where u.id = t.id) x",
		"select t.amount, (t.payload).total from app.ledger t",
		"select setting from pg_settings where name = 'TimeZone'", // reading is the role's grants' business
		"select current_setting('search_path'), txid_current(), xpath('/a', '<a/>'::xml)",
		"insert into app.pg_things values (1)", // a pg_* name qualified with the handler's schema
		`select "TS_STAT"('x')`,                // quoted names are exact, as in PostgreSQL: not ts_stat
	} {
		if err := Check(sql); err != nil {
			t.Errorf("Check(%q) = %v, want nil", sql, err)
		}
	}
}

func TestCheckRefuses(t *testing.T) {
	t.Parallel()
	const q = "'select v from app.t'"
	for _, c := range []struct{ sql, want string }{
		// Commands other than those that read or write rows, by their kind.
		{"set role postgres", "SET statements are not allowed"},
		{"reset role", "RESET statements are not allowed"},
		{"SET SESSION AUTHORIZATION postgres", "SET statements are not allowed"},
		{"/* c */ set search_path = evil, public", "SET statements are not allowed"},
		{"begin", "BEGIN statements are not allowed"},
		{"commit", "COMMIT statements are not allowed"},
		{"copy (select 1) to program 'id'", "COPY statements are not allowed"},
		{"listen x", "LISTEN statements are not allowed"},
		{"notify x", "NOTIFY statements are not allowed"},
		{"do $$ begin end $$", "DO statements are not allowed"},
		{"call p()", "CALL statements are not allowed"},
		{"create table x ()", "CREATE statements are not allowed"},
		{"create temp table x (a int)", "CREATE statements are not allowed"},
		{"create temporary table x as select 1", "CREATE statements are not allowed"},
		{"explain analyze select 1", "EXPLAIN statements are not allowed"},
		{"lock table app.ledger", "LOCK statements are not allowed"},
		{"prepare p as select 1", "PREPARE statements are not allowed"},
		{"execute p", "EXECUTE statements are not allowed"},
		{"declare c cursor with hold for select 1", "DECLARE statements are not allowed"},
		{"grant select on app.ledger to public", "GRANT statements are not allowed"},
		{"/* c */ ( create table x ()", `syntax error at or near "create" (position 11)`},
		{`"select" 1`, `syntax error at or near ""select"" (position 1)`},
		{"selct 1", `syntax error at or near "selct" (position 1)`},
		{"select x frm t", `syntax error at or near "t" (position 14)`},
		{"select 'é' frm t", `syntax error at or near "t" (position 16)`}, // characters, as the server counts
		// SELECT ... INTO creates a table, temporary or not.
		{"select 1 into t", "SELECT ... INTO is not allowed"},
		{"select * into temp t from app.ledger", "SELECT ... INTO is not allowed"},
		{"select 1 into temporary table t", "SELECT ... INTO is not allowed"},
		// One statement.
		{"select 1\x00; select pg_read_file('x')", "the statement contains a NUL byte"},
		{"", "the statement is empty"},
		{"  -- only a comment", "the statement is empty"},
		{"/* only a comment */ ;", "the statement is empty"},
		{"select 1; select 2", "one statement per call"},
		{"select 1; insert into a values (1)", "one statement per call"},
		{"select 1;;", "one statement per call"},
		{"select 1; /* ; */ ;", "one statement per call"},
		{";select 1", "one statement per call"},
		// Refused functions, wherever they are called and however they are spelt.
		{"select set_config('role', 'postgres', false)", "calling set_config is not allowed: it changes settings"},
		{"select pg_catalog.SET_CONFIG ('role', 'x', true)", "calling set_config is not allowed"},
		{`select pg_catalog."set_config"('role', 'x', true)`, "calling set_config is not allowed"},
		{"select set_config /* hidden */ ('role', 'x', true)", "calling set_config is not allowed"},
		{`select U&"\0073et_config"('role', 'x', true)`, "calling set_config is not allowed"},
		{"select 'it''s' || e'\\'', set_config('role', 'x', true)", "calling set_config is not allowed"},
		{"select 1set_config('role', 'x', true)", "trailing junk after numeric literal"},
		{"select pg_read_file('/etc/passwd')", "calling pg_read_file is not allowed: it reaches the server's files"},
		{"select pg_read_binary_file('x')", "calling pg_read_binary_file is not allowed"},
		{"select * from pg_ls_dir('.')", "calling pg_ls_dir is not allowed"},
		{"select * from pg_ls_waldir()", "calling pg_ls_waldir is not allowed"},
		{"select pg_stat_file('x')", "calling pg_stat_file is not allowed"},
		{"select pg_file_write('x', 'y', false)", "calling pg_file_write is not allowed"},
		{"select lo_import('/etc/passwd')", "calling lo_import is not allowed"},
		{"select lo_export(1, '/tmp/x')", "calling lo_export is not allowed"},
		{"select dblink_exec('x', 'y')", "calling dblink_exec is not allowed: it runs a string as SQL"},
		{"select * from dblink('x', 'y') as t(a int)", "calling dblink is not allowed"},
		{"select pg_advisory_lock(1)", "calling pg_advisory_lock is not allowed: it takes an advisory lock"},
		{"select pg_try_advisory_xact_lock(1)", "calling pg_try_advisory_xact_lock is not allowed"},
		{"select pg_notify('pgflow:run:x', '{}')", "calling pg_notify is not allowed: it sends notifications"},
		{"select pg_terminate_backend(1)", "calling pg_terminate_backend is not allowed: it acts on other sessions"},
		{"select pg_cancel_backend(1)", "calling pg_cancel_backend is not allowed"},
		{"select pg_reload_conf()", "calling pg_reload_conf is not allowed"},
		{"select pg_log_backend_memory_contexts(1)", "calling pg_log_backend_memory_contexts is not allowed"},
		{"select pg_logical_emit_message(false, 'p', 'x')", "calling pg_logical_emit_message is not allowed: its effect is outside"},
		{"select pg_create_logical_replication_slot('s', 'test_decoding', true)", "calling pg_create_logical_replication_slot is not allowed"},
		{"select * from pg_logical_slot_get_changes('s', null, null)", "calling pg_logical_slot_get_changes is not allowed"},
		// Every built-in that runs a string as SQL, and the extensions' ones.
		{"select query_to_xml('set role postgres', true, true, '')", "calling query_to_xml is not allowed: it runs a string as SQL"},
		{"select query_to_xmlschema(" + q + ", true, true, '')", "calling query_to_xmlschema is not allowed"},
		{"select query_to_xml_and_xmlschema(" + q + ", true, true, '')", "calling query_to_xml_and_xmlschema is not allowed"},
		{"select cursor_to_xml('c', 1, true, true, '')", "calling cursor_to_xml is not allowed"},
		{"select cursor_to_xmlschema('c', true, true, '')", "calling cursor_to_xmlschema is not allowed"},
		{"select table_to_xml('app.t', true, true, '')", "calling table_to_xml is not allowed"},
		{"select schema_to_xml('app', true, true, '')", "calling schema_to_xml is not allowed"},
		{"select database_to_xml_and_xmlschema(true, true, '')", "calling database_to_xml_and_xmlschema is not allowed"},
		{"select ts_rewrite(q, 'select a, b from aliases') from t", "calling ts_rewrite is not allowed: it runs a string as SQL"},
		{"select * from crosstab(" + q + ") as ct(a text, b int)", "calling crosstab is not allowed"},
		{"select * from connectby('t', 'id', 'parent', '1', 0) as c(a int, b int, l int)", "calling connectby is not allowed"},
		{"select * from xpath_table('id', 'x', 't', '/a', 'true') as x(id int, a text)", "calling xpath_table is not allowed"},
		// ts_stat everywhere a tree can hold a call.
		{"select * from ts_stat(" + q + ")", "calling ts_stat is not allowed: it runs a string as SQL"},
		{"select ts_stat(" + q + ")", "calling ts_stat is not allowed"},
		{"select (select count(*) from ts_stat(" + q + ")) as n", "calling ts_stat is not allowed"},
		{"select * from app.t where exists (select 1 from ts_stat(" + q + ") s where s.word = t.w)", "calling ts_stat is not allowed"},
		{"with s as (select * from ts_stat(" + q + ")) select * from s", "calling ts_stat is not allowed"},
		{"with w as (insert into app.words select word from ts_stat(" + q + ") returning *) select 1", "calling ts_stat is not allowed"},
		{"select upper(ts_stat(" + q + ")::text)", "calling ts_stat is not allowed"},
		{"select coalesce(null, (ts_stat(" + q + ")).word)", "calling ts_stat is not allowed"},
		{"select pg_catalog.ts_stat(" + q + ")", "calling ts_stat is not allowed"},
		{`select "ts_stat"(` + q + ")", "calling ts_stat is not allowed"},
		{`select * from "pg_catalog"."ts_stat"(` + q + ")", "calling ts_stat is not allowed"},
		{"select TS_STAT(" + q + ")", "calling ts_stat is not allowed"},
		{"select * from app.t, lateral ts_stat(t.query) s", "calling ts_stat is not allowed"},
		{"select * from app.t cross join lateral (select * from ts_stat(t.query)) s", "calling ts_stat is not allowed"},
		{"select * from rows from (generate_series(1, 2), ts_stat(" + q + ")) r", "calling ts_stat is not allowed"},
		{"values (1), ((select nentry from ts_stat(" + q + ") limit 1))", "calling ts_stat is not allowed"},
		{"select * from app.t order by (select ndoc from ts_stat(" + q + ") limit 1)", "calling ts_stat is not allowed"},
		{"select count(*) filter (where ts_stat(" + q + ") is not null) from app.t", "calling ts_stat is not allowed"},
		{"update app.t set n = (select ndoc from ts_stat(" + q + ") limit 1) where id = $1", "calling ts_stat is not allowed"},
		{"delete from app.t returning ts_stat(" + q + ")", "calling ts_stat is not allowed"},
		{"insert into app.t values (default, ts_stat(" + q + "))", "calling ts_stat is not allowed"},
		{"merge into app.t using (select * from ts_stat(" + q + ")) s on t.w = s.word when matched then delete", "calling ts_stat is not allowed"},
		{"select 1::numeric(ts_stat(" + q + "))", "calling ts_stat is not allowed"},
		// The attribute notation: t.f and (expr).f call f(t), f(expr).
		{"select s.ts_stat from cast(" + q + " as text) s", "calling ts_stat is not allowed"},
		{"select ((" + q + ")::text).ts_stat", "calling ts_stat is not allowed"},
		{"select (s).pg_read_file from cast('/etc/passwd' as text) s", "calling pg_read_file is not allowed"},
		{"select app.s.set_config from app.s", "calling set_config is not allowed"},
		// Writes to the catalogue, and pg_settings in a statement that writes.
		{"update pg_settings set setting = 'evil, public' where name = 'search_path'", "UPDATE on pg_settings is not allowed"},
		{"update pg_catalog.pg_settings set setting = 'x' where name = 'role'", "UPDATE on pg_catalog.pg_settings is not allowed"},
		{`update "pg_settings" set setting = 'x' where name = 'role'`, "UPDATE on pg_settings is not allowed"},
		{"with s as (update pg_settings set setting = 'x' where name = 'role' returning *) select * from s", "UPDATE on pg_settings is not allowed"},
		{"insert into pg_catalog.pg_description values (1, 1, 0, 'x')", "INSERT on pg_catalog.pg_description is not allowed"},
		{"delete from information_schema.sql_features", "DELETE on information_schema.sql_features is not allowed"},
		{"merge into pg_catalog.pg_settings s using app.t on s.name = t.n when matched then update set setting = t.v", "MERGE on pg_catalog.pg_settings is not allowed"},
		{"insert into app.t select setting from pg_settings", "a statement that writes may not mention pg_settings"},
		{"with s as (select * from pg_catalog.pg_settings) update app.t set v = (select setting from s limit 1)", "a statement that writes may not mention pg_settings"},
		// Too deep for the parser, or for the decoder of its tree.
		{"select " + strings.Repeat("1+(", 5000) + "1" + strings.Repeat(")", 5000), "memory exhausted"},
		{"select " + strings.Repeat("not ", 6000) + "true", "the statement could not be checked"},
		// What the server's scanner refuses.
		{"select 'unterminated", "unterminated quoted string"},
		{"select $x$ unterminated", "unterminated dollar-quoted string"},
		{"select 1 /* unterminated", "unterminated /* comment"},
		{`select "unterminated`, "unterminated quoted identifier"},
		{"select E'\\' ; select 2", "unterminated quoted string"},
	} {
		err := Check(c.sql)
		sql := c.sql
		if len(sql) > 200 {
			sql = sql[:200] + "..."
		}
		if err == nil {
			t.Errorf("Check(%q) = nil, want %q", sql, c.want)
			continue
		}
		if err.Code != abi.ErrSQLRefused || err.Reason != "refused" || !strings.HasPrefix(err.Message, "sql: ") || !strings.Contains(err.Message, c.want) {
			t.Errorf("Check(%q) = %d %q, want code %d and %q", sql, err.Code, err.Message, abi.ErrSQLRefused, c.want)
		}
	}
}

// BenchmarkCheckParse is a statement seen for the first time: parsed and walked.
func BenchmarkCheckParse(b *testing.B) {
	if err := check(benchStatement); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		check(benchStatement)
	}
}

func TestCheckRemembersOnlyStatementsItLetThrough(t *testing.T) {
	t.Parallel()
	const ok, refused = "select 'remembered' from app.t", "select pg_notify('remembered', '')"
	for range 2 {
		if err := Check(ok); err != nil {
			t.Fatalf("Check(%q) = %v", ok, err)
		}
		if err := Check(refused); err == nil {
			t.Fatalf("Check(%q) = nil the second time too", refused)
		}
	}
	if !accepted.has(ok) || accepted.has(refused) {
		t.Errorf("remembered %q: %v, %q: %v; want only the first", ok, accepted.has(ok), refused, accepted.has(refused))
	}
}

// Workers check statements from many goroutines at once; each gets its own verdict.
func TestCheckFromManyGoroutines(t *testing.T) {
	t.Parallel()
	stmts := map[string]bool{ // statement: let through
		benchStatement:                         true,
		"select * from ts_stat('select 1')":    false,
		"select $1::int + 1":                   true,
		"update pg_settings set setting = 'x'": false,
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				for stmt, ok := range stmts {
					stmt := fmt.Sprintf("%s -- %d %d", stmt, g, i%10) // some new, some remembered
					if got := Check(stmt) == nil; got != ok {
						t.Errorf("Check(%q) let through %v, want %v", stmt, got, ok)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestTheAcceptedSetStaysWithinItsBytes(t *testing.T) {
	a := acceptedSet{m: map[string]struct{}{}}
	stmt := strings.Repeat("x", acceptedMaxText)
	for i := range 2 * acceptedMaxBytes / acceptedMaxText {
		a.add(fmt.Sprintf("%08d%s", i, stmt[8:]))
		if a.bytes > acceptedMaxBytes {
			t.Fatalf("after %d statements of %d bytes the set holds %d bytes, over %d", i+1, len(stmt), a.bytes, acceptedMaxBytes)
		}
	}
	a.add(stmt + "x")
	if a.has(stmt + "x") {
		t.Errorf("a statement over %d bytes was remembered", acceptedMaxText)
	}
}
