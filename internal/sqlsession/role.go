package sqlsession

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// QuoteIdent writes a role name as SQL: plain when it reads back the same unquoted, else in
// double quotes (messages show statements a user can paste).
func QuoteIdent(name string) string {
	if plainIdent.MatchString(name) {
		return name
	}
	return pgx.Identifier{name}.Sanitize()
}

// RoleError is a role the step cannot run as, or should not: the message says what to do.
// Other errors of CheckRole are the database's (it could not be asked).
type RoleError struct{ msg string }

func (e *RoleError) Error() string { return e.msg }

func roleErrorf(format string, args ...any) error {
	return &RoleError{msg: fmt.Sprintf(format, args...)}
}

// RoleCheck is what the worker learns about a step's role before it serves the step.
type RoleCheck struct {
	Login          string // the worker's login (session_user)
	LoginSuperuser bool
}

// CheckRole makes sure the worker can run the step's statements as role on db, and that
// role is no wall-breaker: it exists, the worker's login may act as it (tried for real, in
// a transaction rolled back at once), and it is neither a superuser nor a role that
// bypasses row-level security, unless allowPrivileged. Every refusal says what to run.
func CheckRole(ctx context.Context, db *pgxpool.Pool, role string, allowPrivileged bool) (RoleCheck, error) {
	var rc RoleCheck
	var exists, super, bypass bool
	var similar *string
	err := db.QueryRow(ctx, `
		select session_user::text, (select rolsuper from pg_roles where rolname = session_user),
		       r.rolname is not null, coalesce(r.rolsuper, false), coalesce(r.rolbypassrls, false),
		       (select min(rolname) from pg_roles where lower(rolname) = lower($1) and rolname <> $1)
		from (select 1) one left join pg_roles r on r.rolname = $1`, role).
		Scan(&rc.Login, &rc.LoginSuperuser, &exists, &super, &bypass, &similar)
	if err != nil {
		return rc, fmt.Errorf("reading role %q: %w", role, err)
	}
	ident, login := QuoteIdent(role), QuoteIdent(rc.Login)
	switch {
	case !exists && similar != nil:
		return rc, roleErrorf("role %q does not exist (role names are exact: did you mean %q?)", role, *similar)
	case !exists:
		return rc, roleErrorf("role %q does not exist: create it and grant it what the step needs, e.g. "+
			"`CREATE ROLE %s NOLOGIN; GRANT INSERT, SELECT ON app.ledger TO %s; GRANT %s TO %s` (docs/database.md)",
			role, ident, ident, ident, login)
	case super && !allowPrivileged:
		return rc, roleErrorf("role %q is a superuser: its statements would pass every grant and row-level security policy; "+
			"give the step a role with only the grants it needs, or write `allow_privileged_role: true` in its sql section", role)
	case bypass && !allowPrivileged:
		return rc, roleErrorf("role %q bypasses row-level security (BYPASSRLS): give the step a role without it "+
			"(ALTER ROLE %s NOBYPASSRLS), or write `allow_privileged_role: true` in its sql section", role, ident)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return rc, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `select set_config('role', $1, true)`, role); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return rc, roleErrorf("the worker's login %q may not act as role %q: run `GRANT %s TO %s` (docs/database.md)",
				rc.Login, role, ident, login)
		}
		return rc, fmt.Errorf("setting role %q: %w", role, err)
	}
	return rc, nil
}
