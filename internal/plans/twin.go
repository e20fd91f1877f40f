// Package plans keeps the plans of the statements the worker runs for every task: a twin of
// pgflow's start_tasks whose plan PostgreSQL keeps (twin.go), and the switch of a
// transaction to generic plans (generic.go).
//
// The twin: // Up to 0.16, pgflow's start_tasks is an SQL-language function, and PostgreSQL 15 plans an
// SQL function's body afresh at every call: for start_tasks, a 175-line statement, that
// planning is most of the 3-5 ms a call costs, whatever the number of tasks. PL/pgSQL keeps
// a session's plans (for a statement with an array argument such as msg_ids, only where the
// transaction asks for generic plans: QueueGeneric, which fetches use). So, once per
// connection, the twin is made in pg_temp from the body the database itself holds: the same
// single statement, the same arguments, result and settings, inside a PL/pgSQL function that
// returns it. Nothing of pgflow's is copied into pgflow-wasm;
// the twin lives as long as the session and follows whatever release is installed. Where the
// body is not one statement, pgflow's start_tasks is PL/pgSQL already (0.17+), or the session
// may not create temporary objects, fetches call pgflow's own (docs/RATIONALE.md, "A twin of
// start_tasks keeps its plan").
package plans

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// StaleSQLState is the SQLSTATE a twin raises when pgflow's start_tasks it was copied from
// has changed or gone (pgflow upgraded under the session): object_not_in_prerequisite_state,
// which no pgflow function raises and which package dberr counts as neither transient nor
// pgflow's verdict, so no task is failed over it. The transaction is rolled back: nothing is
// started by a stale copy.
const StaleSQLState = "55000"

// key marks a connection (pgconn's CustomData) with the schema its fetches call.
const key = "pgflow-wasm/starttwin"

// Schema returns the schema whose start_tasks a fetch on conn calls: "pg_temp" once the
// session holds a twin, else "pgflow". The first call on a connection makes the twin (one
// catalogue read, one create, one check); why it could not is returned beside "pgflow", for
// a log line, and is not asked again on that connection.
func TwinSchema(ctx context.Context, conn *pgx.Conn) (schema string, why error) {
	data := conn.PgConn().CustomData()
	if s, ok := data[key].(string); ok {
		return s, nil
	}
	schema, why = "pgflow", create(ctx, conn)
	if why == nil {
		schema = "pg_temp"
	} else if ctx.Err() != nil {
		return schema, why // cancelled: try again on this connection next time
	}
	data[key] = schema
	return schema, why
}

// Made returns the schema whose start_tasks a call on conn should use without making
// anything: "pg_temp" where Schema made the session's twin, else "pgflow". For callers
// inside a transaction of their own, which Schema's would end.
func TwinMade(conn *pgx.Conn) string {
	if s, ok := conn.PgConn().CustomData()[key].(string); ok {
		return s
	}
	return "pgflow"
}

// overload is one pgflow.start_tasks as the catalogue describes it.
type overload struct {
	oid                      uint32
	xmin                     string // the row version: changed by CREATE OR REPLACE
	args, result, lang, body string
	settings                 []string // proconfig: name=value
}

// create creates, in one transaction, pg_temp.start_tasks twins of every SQL-language
// pgflow.start_tasks, and checks them with a call on no messages (which changes nothing).
func create(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// With only pg_catalog on the path, the catalogue names every other type with its schema,
	// so the signature reads the same under the function's own search_path below.
	if _, err := tx.Exec(ctx, `select set_config('search_path', 'pg_catalog', true)`); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `select p.oid, p.xmin::text, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), l.lanname, p.prosrc,
	       coalesce(p.proconfig, '{}')
	  from pg_proc p join pg_language l on l.oid = p.prolang
	 where p.pronamespace = 'pgflow'::regnamespace and p.proname = 'start_tasks'`)
	if err != nil {
		return fmt.Errorf("reading pgflow.start_tasks: %w", err)
	}
	overloads, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (o overload, err error) {
		err = r.Scan(&o.oid, &o.xmin, &o.args, &o.result, &o.lang, &o.body, &o.settings)
		return o, err
	})
	if err != nil {
		return fmt.Errorf("reading pgflow.start_tasks: %w", err)
	}
	if len(overloads) == 0 {
		return fmt.Errorf("the database has no pgflow.start_tasks")
	}
	for _, o := range overloads {
		if o.lang != "sql" {
			return fmt.Errorf("pgflow.start_tasks(%s) is %s, which keeps its plans already", o.args, o.lang)
		}
	}
	for _, o := range overloads {
		stmt, names, err := createSQL(o)
		if err != nil {
			return err
		}
		// The twin takes each setting FROM CURRENT, set here to the original's text exactly
		// as stored (written as a literal, a list such as search_path would be quoted again).
		for i, name := range names {
			_, value, _ := strings.Cut(o.settings[i], "=")
			if _, err := tx.Exec(ctx, `select set_config($1, $2, true)`, name, value); err != nil {
				return fmt.Errorf("pgflow.start_tasks(%s) setting %s: %w", o.args, name, err)
			}
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("creating pg_temp.start_tasks(%s): %w", o.args, err)
		}
	}
	// A result the body does not match exactly (PL/pgSQL is stricter about it than SQL)
	// fails here rather than in a fetch.
	if _, err := tx.Exec(ctx, `select count(*) from pg_temp.start_tasks('', '{}'::bigint[], null::uuid)`); err != nil {
		return fmt.Errorf("checking pg_temp.start_tasks: %w", err)
	}
	return tx.Commit(ctx)
}

// createSQL is the statement that creates the twin of one SQL-language start_tasks, and the
// names of the settings it takes from the session. The body must be one statement: an SQL
// function returns its last statement's rows, a RETURN QUERY one statement's.
func createSQL(o overload) (stmt string, settings []string, err error) {
	query, err := oneStatement(o.body)
	if err != nil {
		return "", nil, fmt.Errorf("pgflow.start_tasks(%s): %w", o.args, err)
	}
	// use_column: where a name is both a column and an argument, an SQL function reads the
	// column; PL/pgSQL would refuse the statement as ambiguous. The twin first checks that the
	// original is still the row it was copied from (one index lookup, its plan kept): a
	// pgflow upgraded under the session fails the call rather than run the old body on the new
	// tables.
	code := fmt.Sprintf("#variable_conflict use_column\nbegin\n"+
		"if not exists (select from pg_catalog.pg_proc where oid = %d and xmin = '%s'::xid) then\n"+
		"raise exception using errcode = '%s', message = %s, hint = 'pgflow was changed under this session: reconnect';\n"+
		"end if;\nreturn query\n", o.oid, o.xmin, StaleSQLState,
		quoteLiteral("pgflow.start_tasks("+o.args+") has changed since this session's twin was copied from it")) +
		query + "\n;\nend"
	var set strings.Builder
	for _, s := range o.settings {
		name, _, ok := strings.Cut(s, "=")
		if !ok {
			return "", nil, fmt.Errorf("pgflow.start_tasks(%s) has a setting %q that is not name=value", o.args, s)
		}
		settings = append(settings, name)
		fmt.Fprintf(&set, " set %s from current", pgx.Identifier{name}.Sanitize())
	}
	return fmt.Sprintf("create function pg_temp.start_tasks(%s) returns %s language plpgsql%s as %s",
		o.args, o.result, set.String(), dollarQuote(code)), settings, nil
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// dollarQuote is s between dollar quotes whose tag s does not contain.
func dollarQuote(s string) string {
	tag := "$twin$"
	for i := 0; strings.Contains(s, tag); i++ {
		tag = fmt.Sprintf("$twin%d$", i)
	}
	return tag + s + tag
}
