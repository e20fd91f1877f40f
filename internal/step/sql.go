package step

import (
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
