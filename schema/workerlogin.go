package schema

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// WorkerGrants are the rights a worker login that is not a superuser needs once pgflow-wasm's
// and pgflow's schemas are installed (docs/database.md, section 7), %[1]s the login: pgflow's
// and pgmq's tables and functions, realtime.send, pgflow-wasm's bookkeeping. The default
// privileges give it the same on the queue tables the installing role creates later
// (`compile` of a new flow), so a new flow needs no new grant.
const WorkerGrants = `
grant usage on schema pgflow, pgmq, realtime to %[1]s;
grant select, insert, update, delete on all tables in schema pgflow to %[1]s;
grant select, insert, update, delete, trigger on all tables in schema pgmq to %[1]s;
grant usage, select on all sequences in schema pgflow, pgmq to %[1]s;
grant execute on all functions in schema pgflow, pgmq, realtime to %[1]s;
grant usage on schema pgflow_wasm to %[1]s;
grant select, insert, delete on all tables in schema pgflow_wasm to %[1]s;
alter default privileges in schema pgflow grant select, insert, update, delete on tables to %[1]s;
alter default privileges in schema pgmq grant select, insert, update, delete, trigger on tables to %[1]s;
alter default privileges in schema pgflow, pgmq grant usage, select on sequences to %[1]s;
alter default privileges in schema pgflow_wasm grant select, insert, delete on tables to %[1]s;
`

// WorkerLoginReport is what GrantWorker did.
type WorkerLoginReport struct {
	Created bool // the login did not exist and was created
}

// GrantWorker makes login a worker login: created (LOGIN, not a superuser, password when
// given) when missing, then given WorkerGrants, all in one transaction. A login that
// exists keeps its attributes; one that is a superuser is refused, since the point is a
// login that is not.
func GrantWorker(ctx context.Context, conn *pgx.Conn, login, password string) (WorkerLoginReport, error) {
	var rep WorkerLoginReport
	ident := pgx.Identifier{login}.Sanitize()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var exists, super bool
		if err := tx.QueryRow(ctx, `select count(*) > 0, coalesce(bool_or(rolsuper), false) from pg_roles where rolname = $1`,
			login).Scan(&exists, &super); err != nil {
			return err
		}
		if super {
			return fmt.Errorf("role %q is a superuser: a worker login should not be (docs/database.md); choose another name", login)
		}
		if !exists {
			rep.Created = true
			if _, err := tx.Exec(ctx, "create role "+ident+" login nosuperuser nocreatedb nocreaterole"); err != nil {
				return fmt.Errorf("creating login %q: %w", login, err)
			}
		}
		if password != "" {
			// ALTER ROLE takes no parameters: PostgreSQL's format() quotes the password.
			var stmt string
			if err := tx.QueryRow(ctx, `select format('alter role %I password %L', $1::text, $2::text)`, login, password).Scan(&stmt); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("setting login %q's password: %w", login, err)
			}
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(WorkerGrants, ident)); err != nil {
			return fmt.Errorf("granting login %q the worker's rights (run this as the owner of pgflow's and pgmq's "+
				"schemas, after `db install`): %w", login, err)
		}
		return nil
	})
	return rep, err
}
