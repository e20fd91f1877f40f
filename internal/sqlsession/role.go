package sqlsession

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/jackc/pgpassfile"
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

// RolePoolConfig is base (the step's database as the worker reaches it) logged in as role
// instead: the user is the role, the password the one passwordEnv names (or the password
// file's entry for the role, or none: trust or certificate authentication). The worker's
// own password never travels with it. Statements are never prepared by name, so the
// DISCARD ALL that ends every task leaves no cached statement dangling.
func RolePoolConfig(base *pgxpool.Config, role, passwordEnv string, maxConns int) (*pgxpool.Config, error) {
	cfg := base.Copy()
	cc := cfg.ConnConfig
	cc.User = role
	cc.Password = ""
	if passwordEnv != "" {
		pw, ok := os.LookupEnv(passwordEnv)
		if !ok {
			return nil, roleErrorf("sql.password_env %s is not set in the worker's environment: set it to role %q's password", passwordEnv, role)
		}
		cc.Password = pw
	} else {
		cc.Password = passfilePassword(cc, role)
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	cc.StatementCacheCapacity = 0
	cc.DescriptionCacheCapacity = 0
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = "pgflow-wasm handlers"
	cfg.MaxConns = int32(max(maxConns, 1))
	cfg.MinConns = 0
	// A pool made from a worker's config must not run the worker's own set-up as the role.
	cfg.AfterConnect, cfg.BeforeAcquire, cfg.AfterRelease = nil, nil, nil
	return cfg, nil
}

// passfilePassword is role's password from PGPASSFILE (or ~/.pgpass), "" when none.
func passfilePassword(cc *pgx.ConnConfig, role string) string {
	path := os.Getenv("PGPASSFILE")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		path = filepath.Join(home, ".pgpass")
	}
	pf, err := pgpassfile.ReadPassfile(path)
	if err != nil {
		return ""
	}
	return pf.FindPassword(cc.Host, fmt.Sprint(cc.Port), cc.Database, role)
}

// RoleCheck is what the worker learns about a step's role before it serves the step.
type RoleCheck struct {
	Login string // the worker's login on the step's database (session_user of admin)
}

// CheckRole makes sure the step's statements can run on step (a pool logged in as role,
// RolePoolConfig) and that the role is a wall: it exists, may log in, is not the worker's
// login (admin's session_user) nor a member of it, and is neither a superuser, a role that
// bypasses row-level security nor one that may create roles, unless allowPrivileged. It
// logs in for real. Every refusal says what to run.
func CheckRole(ctx context.Context, admin, step *pgxpool.Pool, role, passwordEnv string, allowPrivileged bool) (RoleCheck, error) {
	var rc RoleCheck
	var exists, super, bypass, createRole, canLogin, memberOfLogin bool
	var similar *string
	err := admin.QueryRow(ctx, `
		select session_user::text, r.rolname is not null, coalesce(r.rolsuper, false), coalesce(r.rolbypassrls, false),
		       coalesce(r.rolcreaterole, false), coalesce(r.rolcanlogin, false),
		       r.rolname is not null and pg_has_role(r.oid, (select oid from pg_roles where rolname = session_user), 'MEMBER'),
		       (select min(rolname) from pg_roles where lower(rolname) = lower($1) and rolname <> $1)
		from (select 1) one left join pg_roles r on r.rolname = $1`, role).
		Scan(&rc.Login, &exists, &super, &bypass, &createRole, &canLogin, &memberOfLogin, &similar)
	if err != nil {
		return rc, fmt.Errorf("reading role %q: %w", role, err)
	}
	ident, login := QuoteIdent(role), QuoteIdent(rc.Login)
	loginHow := "ALTER ROLE " + ident + " LOGIN PASSWORD '...'"
	switch {
	case !exists && similar != nil:
		return rc, roleErrorf("role %q does not exist (role names are exact: did you mean %q?)", role, *similar)
	case !exists:
		return rc, roleErrorf("role %q does not exist: create it with the grants the step needs, e.g. "+
			"`CREATE ROLE %s LOGIN PASSWORD '...'; GRANT INSERT, SELECT ON app.ledger TO %s`, and give the worker its "+
			"password in the environment variable sql.password_env names (docs/database.md)", role, ident, ident)
	case role == rc.Login:
		return rc, roleErrorf("role %q is the worker's own login: a step's statements must run as a role of their own, "+
			"with only the grants they need (docs/database.md)", role)
	case super && !allowPrivileged:
		return rc, roleErrorf("role %q is a superuser: its statements would pass every grant and row-level security policy; "+
			"give the step a role with only the grants it needs, or write `allow_privileged_role: true` in its sql section", role)
	case bypass && !allowPrivileged:
		return rc, roleErrorf("role %q bypasses row-level security (BYPASSRLS): give the step a role without it "+
			"(ALTER ROLE %s NOBYPASSRLS), or write `allow_privileged_role: true` in its sql section", role, ident)
	case createRole && !allowPrivileged:
		return rc, roleErrorf("role %q may create roles (CREATEROLE), and so grant itself others: give the step a role "+
			"without it (ALTER ROLE %s NOCREATEROLE), or write `allow_privileged_role: true` in its sql section", role, ident)
	case memberOfLogin && !super:
		return rc, roleErrorf("role %q is a member of the worker's login %q: its statements could act with the login's "+
			"rights (pgflow's tables): run `REVOKE %s FROM %s`", role, rc.Login, login, ident)
	case !canLogin:
		return rc, roleErrorf("role %q cannot log in: a step's statements run on a session logged in as its role, so that "+
			"none can act with more rights than the role's: run `%s` and give the worker the password in the environment "+
			"variable sql.password_env names (docs/database.md)", role, loginHow)
	}
	var user string
	if err := step.QueryRow(ctx, `select session_user::text`).Scan(&user); err != nil {
		return rc, loginError(err, role, passwordEnv)
	}
	if user != role {
		return rc, roleErrorf("logging in as role %q gave session user %q", role, user)
	}
	return rc, nil
}

// loginError says why the worker could not log in as a step's role, and what to do.
func loginError(err error, role, passwordEnv string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) { // a connect error wraps the server's answer
		return fmt.Errorf("logging in as role %q: %w", role, err)
	}
	switch {
	case pe.Code == "28P01" && passwordEnv == "":
		return roleErrorf("the server wants a password to log in as role %q: write `password_env: NAME` in the step's sql "+
			"section and set NAME to the role's password in the worker's environment (docs/database.md)", role)
	case pe.Code == "28P01":
		return roleErrorf("the server refused the password in %s for role %q: set it to the role's password "+
			"(ALTER ROLE %s PASSWORD '...')", passwordEnv, role, QuoteIdent(role))
	case pe.Code == "28000":
		return roleErrorf("the server refuses role %q's login (%s): allow it in pg_hba.conf, or `ALTER ROLE %s LOGIN`",
			role, pe.Message, QuoteIdent(role))
	}
	return fmt.Errorf("logging in as role %q: %w", role, err)
}
