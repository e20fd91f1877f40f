package jshandler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// sqlApp is a database with app.items writable by the ledger's role, and a pool logged in as
// that role, as the worker opens one.
func sqlApp(t *testing.T) (*pgtest.DB, *pgxpool.Pool, string) {
	t.Helper()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	if _, err := db.Pool.Exec(context.Background(), fmt.Sprintf(`
		create table app.items (id int primary key, name text, tags text[], meta jsonb);
		grant select, insert, update on app.items to %q`, role)); err != nil {
		t.Fatal(err)
	}
	cfg, err := sqlsession.RolePoolConfig(db.Pool.Config(), role, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return db, pool, role
}

// runSQL runs the case of testdata/sql.ts with a session of the grant; the session is left
// open for the caller (closed at the end of the test).
func runSQL(t *testing.T, m sandbox.Module, g *sqlsession.Grant, c string) (*sqlsession.Session, string) {
	t.Helper()
	s := g.Begin(time.Now().Add(30 * time.Second))
	t.Cleanup(s.Close)
	res, err := m.Run(context.Background(), sandbox.Task{Input: []byte(`{"case": "` + c + `"}`), Context: taskContext(nil),
		Timeout: 30 * time.Second, SQL: s})
	if err != nil {
		t.Fatalf("case %s: %v", c, err)
	}
	return s, string(res.Output)
}

// ctx.sql decodes results as postgres.js does: int8 and numeric as strings with every digit,
// timestamps and dates as Date, arrays as arrays of their decoded elements, json parsed,
// bytea as bytes; and each parameter goes as its type (bigint, Date, bytes, arrays, sql.json).
func TestCtxSQLTypesAreThoseOfPostgresJS(t *testing.T) {
	t.Parallel()
	_, pool, role := sqlApp(t)
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "sql.ts", sandbox.ModuleConfig{})
		g := &sqlsession.Grant{Where: "step s", Role: role, DB: pool}
		_, got := runSQL(t, m, g, "types")
		jsonEqual(t, []byte(got), `{"row": {
			"i8": ["string", "9007199254740993"], "num": ["string", "12345678901234567890.5"], "i4": ["number", 42],
			"f8": ["number", 1.5], "b": ["boolean", true], "tstz": ["Date", "2024-02-29T12:34:56.789Z"],
			"d": ["Date", "2024-02-29T00:00:00.000Z"], "ts": ["Date", "2024-02-29T01:02:03.000Z"],
			"ta": ["array", ["a", "b c", "\"q\"\\", null]], "ia": ["array", [[1, 2], [3, 4]]],
			"i8a": ["array", ["9007199254740993"]], "jb": ["object", {"a": [1, "x"]}], "j": ["array", [1, 2]],
			"by": ["Uint8Array", [0, 255]], "n": ["null", null], "t": ["string", "x"], "u": ["boolean", true]},
			"count": 1, "command": "SELECT",
			"columns": ["i8:20", "num:1700", "i4:23", "f8:701", "b:16", "tstz:1184", "d:1082", "ts:1114", "ta:1009",
				"ia:1007", "i8a:1016", "jb:3802", "j:114", "by:17", "n:23", "t:25", "u:16"]}`)
		_, got = runSQL(t, m, g, "params")
		jsonEqual(t, []byte(got), `{"big": "9007199254740993", "epoch": "1704164645.678000", "by": [0, 255, 16], "ia": [1, 2, 3],
			"ta": ["x", "y \"z\"", "a\\b", null], "jb": {"a": [1, "x"]}, "anyof": true, "s": "it's", "n": null, "b": true}`)
	})
}

// postgres.js's helpers: an object or objects for insert (all keys, or the columns named),
// an update's column list, IN lists (an empty one matches nothing), identifiers, fragments,
// sql.unsafe and .values().
func TestCtxSQLHelpersAreThoseOfPostgresJS(t *testing.T) {
	t.Parallel()
	_, pool, role := sqlApp(t)
	e, err := sandbox.New(sandbox.Engines()[0], sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	m := load(t, e, "sql.ts", sandbox.ModuleConfig{})
	_, got := runSQL(t, m, &sqlsession.Grant{Where: "step s", Role: role, DB: pool, Transactional: true}, "helpers")
	jsonEqual(t, []byte(got), `{"insertMany": [2, "INSERT", [2, 3]], "update": [1, "UPDATE"], "in": [1, 3], "emptyIn": 0,
		"identifiers": [{"name": "A"}], "columnList": [{"id": 1, "name": "A"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}],
		"unsafe": [{"n": 2}], "fragment": [1, 3], "values": [[1, "b"]], "row1": {"tags": ["x", "y"], "meta": {"k": 1}}}`)
}

// The edges: begin's options (read write is taken, an isolation level refused), a block
// returning an array of queries, sql() with nothing, sql.unsafe as a fragment, NaN and
// infinities, arrays with bounds and empty ones, a query awaited twice running once, and a
// step without an sql grant.
func TestCtxSQLEdges(t *testing.T) {
	t.Parallel()
	_, pool, role := sqlApp(t)
	e, err := sandbox.New(sandbox.Engines()[0], sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	m := load(t, e, "sql.ts", sandbox.ModuleConfig{})
	_, got := runSQL(t, m, &sqlsession.Grant{Where: "step s", Role: role, DB: pool, Transactional: true}, "edges")
	jsonEqual(t, []byte(got), `{"options": "sql.begin: the options \"isolation level serializable\" are not available (a task's transaction is read committed, read write)",
		"readWrite": 1, "arrayResult": [1, 2], "noArgument": "TypeError",
		"unsafeFragment": "sql.unsafe with parameters cannot be a fragment of another statement", "unsafeInline": 42,
		"special": ["NaN", "-Infinity", [5, 6], []], "once": 1}`)
	res, err := m.Run(context.Background(), sandbox.Task{Input: []byte(`{"case": "denied"}`), Context: taskContext(nil), Timeout: 10 * time.Second})
	if err != nil || !strings.Contains(string(res.Output), `[-1,"sql: `) || !strings.Contains(string(res.Output), "may not run SQL") {
		t.Errorf("without a grant: %s, %v", res.Output, err)
	}
}

// sql.begin commits or rolls back as a block (a savepoint in a transactional step, a real
// transaction in another), sql.savepoint nests, and a failed statement outside a block can be
// caught: the statements after it run, and a transactional task's transaction is not aborted.
func TestCtxSQLBeginAndCaughtFailures(t *testing.T) {
	t.Parallel()
	for _, transactional := range []bool{true, false} {
		t.Run(fmt.Sprintf("transactional=%v", transactional), func(t *testing.T) {
			t.Parallel()
			db, pool, role := sqlApp(t)
			e, err := sandbox.New(sandbox.Engines()[0], sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(context.Background()) })
			m := load(t, e, "sql.ts", sandbox.ModuleConfig{})
			s, got := runSQL(t, m, &sqlsession.Grant{Where: "step s", Role: role, DB: pool, Transactional: transactional}, "transactions")
			jsonEqual(t, []byte(got), `{"committed": 3, "codes": ["22P02", "rolled back by the handler", "22012", "savepoint 22012", "25P02"],
				"ids": [10, 11, 12, 15, 17]}`)
			if s.Failed() != nil || s.Open() != transactional {
				t.Errorf("the session: failed %v, open %v", s.Failed(), s.Open())
			}
			var ids []int
			rows, err := db.Pool.Query(context.Background(), "select id from app.items order by id")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id int
				_ = rows.Scan(&id)
				ids = append(ids, id)
			}
			want := "[10 11 12 15 17]"
			if transactional {
				want = "[]" // not committed yet: the task's completion commits them
			}
			if fmt.Sprint(ids) != want && !(want == "[]" && len(ids) == 0) {
				t.Errorf("rows seen outside the task: %v, want %s", ids, want)
			}
		})
	}
}

// The statement filter and the role stay walls behind every helper: sql.unsafe's text is
// filtered as any statement, and a block cannot be opened by the guest's text.
func TestCtxSQLKeepsTheWalls(t *testing.T) {
	t.Parallel()
	_, pool, role := sqlApp(t)
	e, err := sandbox.New(sandbox.Engines()[0], sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	dir := t.TempDir()
	src := `export default async function (input: {q: string}, ctx: any) {
		try { await ctx.sql.unsafe(input.q); return "ran"; } catch (e: any) { return e.code + " " + e.message; }
	}`
	m := loadSource(t, e, dir, src)
	for q, want := range map[string]string{
		"savepoint x":               "-11 sql: ",
		"rollback":                  "-11 sql: ",
		"set role postgres":         "-11 sql: ",
		"select * from secret.keys": "42501 sql: permission denied for schema secret",
	} {
		s := (&sqlsession.Grant{Where: "step s", Role: role, DB: pool, Transactional: true}).Begin(time.Now().Add(time.Minute))
		in, _ := json.Marshal(map[string]string{"q": q})
		res, err := m.Run(context.Background(), sandbox.Task{Input: in, Context: taskContext(nil), Timeout: 30 * time.Second, SQL: s})
		s.Close()
		if err != nil || !strings.HasPrefix(strings.Trim(string(res.Output), `"`), want) {
			t.Errorf("%s: %s, %v; want %q", q, res.Output, err, want)
		}
	}
}

// loadSource loads a handler written to dir/handler.ts.
func loadSource(t *testing.T, e sandbox.Engine, dir, src string) *jshandler.Module {
	t.Helper()
	p := filepath.Join(dir, "handler.ts")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := jshandler.Load(context.Background(), e, p, sandbox.ModuleConfig{}, jshandler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}
