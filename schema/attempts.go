package schema

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnsureAttemptHistory creates pgflow_wasm.task_attempts (sql/attempts.sql) when it is
// missing. `db install` and every worker at start call it; a worker whose role may not
// create it goes on without the history (the caller logs the error).
func EnsureAttemptHistory(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) error {
	return createRaced(func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var exists bool
			if err := tx.QueryRow(ctx, `select to_regclass('pgflow_wasm.task_attempts') is not null`).Scan(&exists); err != nil || exists {
				return err
			}
			// CREATE TABLE IF NOT EXISTS is not safe against a concurrent creator.
			if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, LockKeyAttemptHistory); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, attemptsSQL)
			return err
		})
	})
}

// createRaced runs create again, twice at most, when it met the row of a concurrent creator
// of the same object. Creators take an advisory lock, which orders them, but the second's
// catalogue cache may predate the first's commit (taking an advisory lock reads no
// invalidations), so its CREATE ... IF NOT EXISTS can still meet the other's row; a new
// transaction sees it.
func createRaced(create func() error) error {
	for try := 1; ; try++ {
		err := create()
		var pe *pgconn.PgError
		if try < 3 && errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P06" || pe.Code == "42P07") {
			continue
		}
		return err
	}
}

// PruneAttemptHistory deletes attempts that failed longer ago than keep, at most limit rows
// per call (a sweep calls it again later), and returns how many it deleted.
func PruneAttemptHistory(ctx context.Context, pool *pgxpool.Pool, keep time.Duration, limit int) (int64, error) {
	tag, err := pool.Exec(ctx, `delete from pgflow_wasm.task_attempts where ctid = any(array(
		select ctid from pgflow_wasm.task_attempts where failed_at < now() - make_interval(secs => $1) limit $2))`,
		keep.Seconds(), limit)
	return tag.RowsAffected(), err
}
