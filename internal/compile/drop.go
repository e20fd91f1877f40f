package compile

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgflow flows are immutable, so while a flow is being written its slug is spent by every
// change of shape. Drop removes a flow with all its runs, steps and tasks and its queue, so
// the slug can be used again. It is for development: it deletes run history.

// DropReport says what Drop removed.
type DropReport struct {
	Slug    string
	Runs    int // runs deleted
	Running int // of which were still running
}

// RunningError refuses to drop a flow whose runs are still going.
type RunningError struct {
	Slug    string
	Running int
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("flow %q has %d runs in progress: wait for them, or drop it anyway with --force (their tasks are lost)", e.Slug, e.Running)
}

// Counts reads how many runs a flow has and how many of them are running; found is false
// when the flow does not exist.
func Counts(ctx context.Context, pool *pgxpool.Pool, slug string) (runs, running int, found bool, err error) {
	err = pool.QueryRow(ctx, `select exists (select 1 from pgflow.flows where flow_slug = $1),
		(select count(*) from pgflow.runs where flow_slug = $1),
		(select count(*) from pgflow.runs where flow_slug = $1 and status = 'started')`, slug).Scan(&found, &runs, &running)
	return runs, running, found, err
}

// Drop deletes the flow and everything pgflow keeps of it, in one transaction under the
// compile lock. Runs in progress refuse it unless force.
func Drop(ctx context.Context, pool *pgxpool.Pool, slug string, force bool) (DropReport, error) {
	rep := DropReport{Slug: slug}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext($1))`, lockKey); err != nil {
			return err
		}
		var found bool
		if err := tx.QueryRow(ctx, `select exists (select 1 from pgflow.flows where flow_slug = $1),
			(select count(*) from pgflow.runs where flow_slug = $1),
			(select count(*) from pgflow.runs where flow_slug = $1 and status = 'started')`, slug).
			Scan(&found, &rep.Runs, &rep.Running); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("no flow %q in this database", slug)
		}
		if rep.Running > 0 && !force {
			return &RunningError{Slug: slug, Running: rep.Running}
		}
		for _, table := range []string{"step_tasks", "step_states", "runs", "deps", "steps", "flows"} {
			if _, err := tx.Exec(ctx, `delete from pgflow.`+table+` where flow_slug = $1`, slug); err != nil {
				return fmt.Errorf("deleting flow %s from pgflow.%s: %w", slug, table, err)
			}
		}
		if _, err := tx.Exec(ctx, `select pgmq.drop_queue($1)`, slug); err != nil {
			return fmt.Errorf("dropping queue %s: %w", slug, err)
		}
		return nil
	})
	return rep, err
}
