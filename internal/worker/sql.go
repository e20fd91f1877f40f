package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Handlers' SQL runs on pools of its own, one per step role and database (the pgflow
// database, or the one a database_env names), each logged in as the role itself
// (sqlsession.RolePoolConfig), never on the worker's pool: a statement can never act with
// the login's rights, and a handler holding a connection for its whole transaction never
// takes one the fetch or the completer waits for. Each has room for every handler at once,
// so a statement never waits for a connection.

// sqlGrant builds step s's grant with its role's pool, opened lazily (no connection until
// a statement or the role check needs one).
func (w *Worker) sqlGrant(file *flowfile.File, fl *flowfile.Flow, s *flowfile.Step) *sqlsession.Grant {
	sec := s.SQL
	if sec == nil {
		return nil
	}
	g := step.Grant(file, fl, s)
	if obs := w.cfg.Metrics.SQLObserver(fl.Slug, s.Slug); obs != nil {
		g.Observer = obs
	}
	if w.sqlPools == nil {
		w.sqlPools = map[string]*pgxpool.Pool{}
	}
	key := sec.DatabaseEnv + "\x00" + sec.Role + "\x00" + sec.PasswordEnv
	if pool, ok := w.sqlPools[key]; ok {
		g.DB = pool
		return g
	}
	pool, err := step.RolePool(context.Background(), w.cfg.Pool.Config(), g.Where, sec, w.cfg.Concurrency)
	if err != nil {
		g.Unavailable = err.Error()
		w.log.Warn("a step's sql database is not configured: its handler's statements fail", "flow", fl.Slug, "step", s.Slug,
			"database_env", sec.DatabaseEnv, "error", err)
		return g
	}
	g.DB = pool
	w.sqlPools[key] = pool
	return g
}

func (w *Worker) closeSQLPools() {
	for _, p := range w.sqlPools {
		p.Close()
	}
}

// checkSQLRoles refuses to serve a step whose role the worker cannot log in as, or whose
// role would be no wall (the worker's login or a member of it, a superuser, BYPASSRLS,
// CREATEROLE) without the step's say-so; and a transactional step on a database without
// the completion function (schema.EnsureStepCompletion), whose key it keeps for proofs. A
// database_env database that cannot be reached now is only warned about: its steps'
// statements fail until it can be.
func (w *Worker) checkSQLRoles(ctx context.Context) error {
	admins := map[string]*pgxpool.Pool{"": w.cfg.Pool}
	defer func() {
		for env, p := range admins {
			if env != "" {
				p.Close()
			}
		}
	}()
	for _, fs := range w.flows {
		for _, st := range fs.steps {
			g := st.sql
			if g == nil {
				continue
			}
			sec := st.def.SQL
			if g.DB == nil {
				if sec.DatabaseEnv == "" { // the pgflow database is always there: the step is misconfigured
					return errors.New(g.Unavailable)
				}
				continue
			}
			if g.Transactional && w.stepProofKey == nil {
				key, err := schema.EnsureStepCompletion(ctx, w.cfg.Pool, false)
				if err != nil {
					return fmt.Errorf("%s: transactional SQL: %w", g.Where, err)
				}
				w.stepProofKey = key
			}
			admin := admins[sec.DatabaseEnv]
			if admin == nil {
				base, err := step.SQLBase(w.cfg.Pool.Config(), g.Where, sec)
				if err == nil {
					admin, err = pgxpool.NewWithConfig(ctx, base)
				}
				if err != nil {
					w.log.Warn("cannot check a step's sql.role now: its statements fail until its database answers",
						"flow", fs.def.Slug, "step", st.def.Slug, "database_env", sec.DatabaseEnv, "error", err)
					continue
				}
				admins[sec.DatabaseEnv] = admin
			}
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err := sqlsession.CheckRole(cctx, admin, g.DB, g.Role, sec.PasswordEnv, sec.AllowPrivilegedRole)
			cancel()
			var re *sqlsession.RoleError
			switch {
			case errors.As(err, &re) || (err != nil && sec.DatabaseEnv == ""):
				return fmt.Errorf("%s: sql.role: %w", g.Where, err)
			case err != nil:
				w.log.Warn("cannot check a step's sql.role now: its statements fail until its database answers",
					"flow", fs.def.Slug, "step", st.def.Slug, "database_env", sec.DatabaseEnv, "error", err)
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
func (w *Worker) completeInTx(t fetched.Task, sess *sqlsession.Session, o completer.Outcome) txEnd {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.runCtx), 45*time.Second)
	defer cancel()
	call := taskwrite.Call{RunID: t.RunID, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Attempt: t.Attempt, Arg: string(o.Output),
		WorkerID: t.WorkerID}
	c, err := sess.Complete(ctx, call, schema.StepProof(w.stepProofKey, t.RunID, t.StepSlug, t.TaskIndex, t.Attempt))
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
