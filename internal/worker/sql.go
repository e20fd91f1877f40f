package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
)

// Handlers' SQL runs on pools of its own, one per database (the pgflow database, and one
// per database_env name), never on the worker's pool: a handler holding a connection for
// its whole transaction must not take one the fetch or the completer waits for. Each has
// room for every handler at once, so a statement never waits for a connection.

// StepGrant is step s's sql section as a grant, without its database (DB) or observer: the
// worker adds its pools, replay the pgflow database it reads from. s.SQL must not be nil.
func StepGrant(file *flowfile.File, fl *flowfile.Flow, s *flowfile.Step) *sqlsession.Grant {
	sec := s.SQL
	return &sqlsession.Grant{Where: s.WhereSQL(file, fl), Role: sec.Role, Transactional: sec.Transactional,
		StatementTimeout: sec.StatementTimeout, MaxRows: sec.MaxRows, MaxResultBytes: int(sec.MaxResultBytes)}
}

// sqlPools opens (lazily: no connection until a statement needs one) the pools the steps'
// sql sections name, and builds each step's grant.
func (w *Worker) sqlGrant(file *flowfile.File, fl *flowfile.Flow, s *flowfile.Step) *sqlsession.Grant {
	sec := s.SQL
	if sec == nil {
		return nil
	}
	g := StepGrant(file, fl, s)
	if obs := w.cfg.Metrics.SQLObserver(fl.Slug, s.Slug); obs != nil {
		g.Observer = obs
	}
	if w.sqlPools == nil {
		w.sqlPools = map[string]*pgxpool.Pool{}
	}
	if pool, ok := w.sqlPools[sec.DatabaseEnv]; ok {
		g.DB = pool
		return g
	}
	var cfg *pgxpool.Config
	if sec.DatabaseEnv == "" {
		cfg = w.cfg.Pool.Config() // a copy
	} else {
		url, set := os.LookupEnv(sec.DatabaseEnv)
		if !set {
			g.Unavailable = fmt.Sprintf("the database of %s is not configured: sql.database_env %s is not set in the worker's environment",
				g.Where, sec.DatabaseEnv)
			w.log.Warn("a step's sql.database_env is not set: its handler's statements fail", "flow", fl.Slug, "step", s.Slug,
				"database_env", sec.DatabaseEnv)
			return g
		}
		var err error
		if cfg, err = pgxpool.ParseConfig(url); err != nil {
			// The parser's message may quote the URL, which holds a password: say only which.
			g.Unavailable = fmt.Sprintf("the database of %s is not configured: the value of %s is not a PostgreSQL URL or connection string",
				g.Where, sec.DatabaseEnv)
			w.log.Warn("a step's sql.database_env does not hold a database URL: its handler's statements fail", "flow", fl.Slug,
				"step", s.Slug, "database_env", sec.DatabaseEnv)
			return g
		}
	}
	cfg.MaxConns = int32(max(w.cfg.Concurrency, 1))
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = time.Minute
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgflow-wasm handlers"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		g.Unavailable = fmt.Sprintf("the database of %s is not configured: %v", g.Where, err)
		return g
	}
	w.sqlPools[sec.DatabaseEnv] = pool
	g.DB = pool
	return g
}

func (w *Worker) closeSQLPools() {
	for _, p := range w.sqlPools {
		p.Close()
	}
}

// checkSQLRoles refuses to serve a step whose role the worker cannot use, or whose role
// would be no wall (a superuser, BYPASSRLS) without the step's say-so. A database_env
// database that cannot be reached now is only warned about: its steps' statements fail
// until it can be.
func (w *Worker) checkSQLRoles(ctx context.Context) error {
	warnedLogin := false
	for _, fs := range w.flows {
		for _, st := range fs.steps {
			g := st.sql
			if g == nil || g.DB == nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			rc, err := sqlsession.CheckRole(cctx, g.DB, g.Role, st.def.SQL.AllowPrivilegedRole)
			cancel()
			var re *sqlsession.RoleError
			switch {
			case errors.As(err, &re) || (err != nil && st.def.SQL.DatabaseEnv == ""):
				return fmt.Errorf("%s: sql.role: %w", g.Where, err)
			case err != nil:
				w.log.Warn("cannot check a step's sql.role now: its statements fail until its database answers",
					"flow", fs.def.Slug, "step", st.def.Slug, "database_env", st.def.SQL.DatabaseEnv, "error", err)
				continue
			}
			if rc.LoginSuperuser && !warnedLogin {
				warnedLogin = true
				w.log.Warn("the worker's database login is a superuser: in production run it as a login that is not "+
					"(a function a step's role may call could reach the login's rights; docs/database.md)", "login", rc.Login)
			}
		}
	}
	return nil
}

// completeInTx finishes a task of a transactional step whose handler succeeded: its
// completion is written inside the task's transaction, which then commits. It returns
// what to do with the outcome:
//   - written: committed with the handler's writes; the caller reports it;
//   - a plain outcome for the completer: pgflow did not complete the task in the
//     transaction (stale, or it took the output another way), so the transaction was
//     rolled back and the outcome is written the usual way, without the handler's writes;
//     or the transaction failed, and the outcome is a failure pgflow retries;
//   - forget: the COMMIT's answer was lost; the task stays started and the worker forgets
//     it, so its hand-back (orphans.go) or recovery returns it to pgflow if the commit did
//     not land.
func (w *Worker) completeInTx(t poller.Task, sess *sqlsession.Session, o completer.Outcome) txEnd {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.runCtx), 45*time.Second)
	defer cancel()
	call := taskwrite.Call{RunID: t.RunID, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Attempt: t.Attempt, Arg: string(o.Output)}
	c, err := sess.Complete(ctx, call)
	log := w.taskLog(&t)
	switch {
	case c.Unknown:
		log.log(slog.LevelWarn, "the task's transaction may or may not have committed (the answer to its COMMIT was lost): "+
			"the task is left to recovery, which hands it back to pgflow unless it completed", "error", err)
		return txEnd{forget: "the answer to the COMMIT of its transactional step's writes and completion was lost (" + err.Error() + ")"}
	case err != nil:
		log.log(slog.LevelWarn, "the task's transaction did not commit: the task fails and pgflow retries it", "error", err)
		return txEnd{outcome: completer.Outcome{Task: t, Failed: true, Error: err.Error()}}
	case c.Committed:
		return txEnd{written: &completer.Written{Outcome: o, Status: c.Result.Status, Attempts: c.Result.Attempts,
			ErrorMessage: c.Result.ErrorMessage}}
	}
	// Rolled back: the completer writes the output alone and reports what pgflow did.
	log.log(slog.LevelInfo, "pgflow did not complete the task inside its transaction: the handler's writes are rolled back",
		"stale", c.Result.Stale, "status", c.Result.Status)
	return txEnd{outcome: o}
}

// txEnd is what completeInTx decided (exactly one field is set).
type txEnd struct {
	written *completer.Written
	outcome completer.Outcome
	forget  string
}
