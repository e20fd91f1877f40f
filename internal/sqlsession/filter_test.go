//go:build cgo

// The parse-tree filter's; a build without cgo has the text filter (sandbox/sqlcap/lexfilter.go).

package sqlsession_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

// Statements that make PostgreSQL run a string as SQL, or change a setting, without any
// refused word outside a string constant: the server runs each (shown as its superuser, in
// a transaction rolled back), and a handler's session refuses each before it is sent.
func TestStatementsThatRunAStringAsSQLAreRefusedBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	for _, c := range []struct {
		sql, want string
		ran       string // a query that tells the statement ran, when its rows do not
	}{
		{sql: "select word from ts_stat('select to_tsvector(''simple'', ''inner query'')')", want: "calling ts_stat is not allowed"},
		{sql: "select s.ts_stat from cast('select to_tsvector(''simple'', ''inner'')' as text) s", want: "calling ts_stat is not allowed"},
		{sql: "select ((('select to_tsvector(''simple'', ''inner'')')::text).ts_stat).word", want: "calling ts_stat is not allowed"},
		{sql: "select ts_rewrite('a'::tsquery, 'select ''a''::tsquery, ''b''::tsquery')", want: "calling ts_rewrite is not allowed"},
		{sql: "select query_to_xml('select current_user', true, true, '')", want: "calling query_to_xml is not allowed"},
		{sql: "update pg_settings set setting = 'pg_catalog' where name = 'search_path'", want: "UPDATE on pg_settings is not allowed",
			ran: "select current_setting('search_path') = 'pg_catalog'"},
		{sql: "select 1 as n into app.made_by_a_handler", want: "SELECT ... INTO is not allowed",
			ran: "select to_regclass('app.made_by_a_handler') is not null"},
	} {
		ctx := context.Background()
		tx, err := a.db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tag, err := tx.Exec(ctx, c.sql)
		ran := err == nil && tag.RowsAffected() > 0
		if err == nil && c.ran != "" {
			err = tx.QueryRow(ctx, c.ran).Scan(&ran)
		}
		if rb := tx.Rollback(ctx); rb != nil {
			t.Fatal(rb)
		}
		if err != nil || !ran {
			t.Fatalf("the server did not run %s (the test needs a statement it runs): %v", c.sql, err)
		}
		for _, transactional := range []bool{false, true} {
			s := a.grant(transactional).Begin(time.Now().Add(time.Minute))
			_, err := query(t, s, c.sql)
			s.Close()
			expectCode(t, err, abi.ErrSQLRefused, "", c.want)
		}
	}
}
