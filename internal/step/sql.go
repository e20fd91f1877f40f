package step

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
)

// Grant is step s's sql section as a grant, without its database (DB) or observer: the
// worker adds its pools, replay its own. s.SQL must not be nil.
func Grant(file *flowfile.File, fl *flowfile.Flow, s *flowfile.Step) *sqlsession.Grant {
	sec := s.SQL
	return &sqlsession.Grant{Where: s.WhereSQL(file, fl), Role: sec.Role, Transactional: sec.Transactional,
		StatementTimeout: sec.StatementTimeout, MaxRows: sec.MaxRows, MaxResultBytes: int(sec.MaxResultBytes)}
}

// SQLBase is the configuration of the database a step's statements run on, as the worker
// reaches it: pgflowDB's for the pgflow database, else the URL in the environment variable
// sql.database_env names. The error says what to set; it never quotes the URL.
func SQLBase(pgflowDB *pgxpool.Config, where string, sec *flowfile.SQL) (*pgxpool.Config, error) {
	if sec.DatabaseEnv == "" {
		return pgflowDB.Copy(), nil
	}
	url, set := os.LookupEnv(sec.DatabaseEnv)
	if !set {
		return nil, fmt.Errorf("the database of %s is not configured: sql.database_env %s is not set in the worker's environment",
			where, sec.DatabaseEnv)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parser's message may quote the URL, which holds a password: say only which.
		return nil, fmt.Errorf("the database of %s is not configured: the value of %s is not a PostgreSQL URL or connection string",
			where, sec.DatabaseEnv)
	}
	return cfg, nil
}

// RolePool opens a pool of at most conns connections on the database of step section sec,
// logged in as its role (sqlsession.RolePoolConfig), lazily: no connection until one is
// needed. The worker's handlers and replay run a step's statements on it. Errors say what
// to set, naming the step (where).
func RolePool(ctx context.Context, pgflowDB *pgxpool.Config, where string, sec *flowfile.SQL, conns int) (*pgxpool.Pool, error) {
	base, err := SQLBase(pgflowDB, where, sec)
	if err != nil {
		return nil, err
	}
	cfg, err := sqlsession.RolePoolConfig(base, sec.Role, sec.PasswordEnv, conns)
	if err == nil {
		var pool *pgxpool.Pool
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err == nil {
			return pool, nil
		}
	}
	return nil, fmt.Errorf("%s: sql: %w", where, err)
}
