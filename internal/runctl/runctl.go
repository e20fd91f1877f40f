// Package runctl is what an operator does to a run: cancel it (its running handlers stop, and
// nothing of it is left started or queued) and run it again with the same input. Every action
// is recorded in pgflow_wasm.operator_actions, with who asked.
//
// pgflow has no function that cancels a run. Cancel does in one transaction what pgflow 0.15.1+
// does itself when a run fails: it takes the run row first (the lock every writer of a run
// takes first), turns its queued and started tasks into `cancelled` (before 0.15.1, which has
// no such status: `failed`, with the reason), fails its started steps and the run, archives the
// tasks' messages, and sends pgflow's run:failed event. Workers then stop the handlers of those
// tasks: pgflow-wasm's within its --cancel-check-interval (internal/worker/cancel.go), and their
// late outcomes change nothing.
package runctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// ErrNotRunning is returned when cancelling a run that has ended.
var ErrNotRunning = errors.New("the run is not running")

// Cancelled is what Cancel did.
type Cancelled struct {
	RunID string
	Flow  string
	Tasks int // queued or started tasks it cancelled
}

// Cancel cancels a running run; why is stored on its tasks and steps and in the audit,
// actor says who asked (a user, "dashboard <address>").
func Cancel(ctx context.Context, pool *pgxpool.Pool, runID, actor, why string) (Cancelled, error) {
	c := Cancelled{RunID: runID}
	if err := EnsureTables(ctx, pool); err != nil {
		return c, err
	}
	proto, err := schema.DetectPgflow(ctx, pool)
	if err != nil {
		return c, err
	}
	msg := "Cancelled by " + actor
	if why != "" {
		msg += ": " + why
	}
	cancelledStatus, failedAt := "'failed'", "now()"
	if proto.Lifecycle {
		cancelledStatus, failedAt = "'cancelled'", "failed_at" // as pgflow cancels: no failed_at
	}
	queue := "flow_slug"
	if proto.QueueNames {
		queue = "queue_name"
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var status string
		if err := tx.QueryRow(ctx, `select flow_slug, status from pgflow.runs where run_id = $1::text::uuid for update`, runID).
			Scan(&c.Flow, &status); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("no run %s", runID)
			}
			return err
		}
		if status != "started" {
			return fmt.Errorf("%w: run %s is %s", ErrNotRunning, runID, status)
		}
		rows, err := tx.Query(ctx, `update pgflow.step_tasks set status = `+cancelledStatus+`, failed_at = `+failedAt+`,
			  error_message = $2
			where run_id = $1::text::uuid and status in ('queued', 'started')
			returning `+queue+`, message_id`, runID, msg)
		if err != nil {
			return err
		}
		byQueue := map[string][]int64{}
		for rows.Next() {
			var q string
			var id *int64
			if err := rows.Scan(&q, &id); err != nil {
				rows.Close()
				return err
			}
			c.Tasks++
			if id != nil {
				byQueue[q] = append(byQueue[q], *id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update pgflow.step_states set status = 'failed', failed_at = now(), error_message = $2
			where run_id = $1::text::uuid and status = 'started'`, runID, msg); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1::text::uuid`, runID); err != nil {
			return err
		}
		// The messages go after their tasks, in the order pgflow's own functions keep.
		for q, ids := range byQueue {
			if _, err := tx.Exec(ctx, `select pgmq.archive($1, $2::bigint[])`, q, ids); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `select realtime.send(jsonb_build_object('event_type', 'run:failed', 'run_id', $1::text, 'flow_slug', $2::text,
			  'status', 'failed', 'error_message', $3::text, 'failed_at', now()), 'run:failed', 'pgflow:run:' || $1::text, false)`,
			runID, c.Flow, msg); err != nil {
			return err
		}
		return audit(ctx, tx, "cancel", runID, "", actor, fmt.Sprintf("%s; %d tasks cancelled", msg, c.Tasks))
	})
	return c, err
}

// Rerun starts a new run of the same flow with the same input and records which run it
// repeats; it returns the new run's id.
func Rerun(ctx context.Context, pool *pgxpool.Pool, runID, actor string) (string, error) {
	if err := EnsureTables(ctx, pool); err != nil {
		return "", err
	}
	var newID string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var flow string
		var input json.RawMessage
		if err := tx.QueryRow(ctx, `select flow_slug, input from pgflow.runs where run_id = $1::text::uuid`, runID).Scan(&flow, &input); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("no run %s", runID)
			}
			return err
		}
		var err error
		if newID, err = store.Start(ctx, tx, flow, input); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `insert into pgflow_wasm.reruns (run_id, rerun_of, actor) values ($1::text::uuid, $2::text::uuid, $3)`,
			newID, runID, actor); err != nil {
			return err
		}
		return audit(ctx, tx, "rerun", runID, newID, actor, "new run "+newID+" of flow "+flow+" with the same input")
	})
	return newID, err
}

// Links are a run's rerun links: the run it repeats ("" when none) and the runs started as
// its reruns, oldest first.
type Links struct {
	RerunOf string
	Reruns  []string
}

// RerunLinks reads a run's rerun links (none before any rerun created the tables).
func RerunLinks(ctx context.Context, pool *pgxpool.Pool, runID string) (Links, error) {
	var l Links
	var exists bool
	if err := pool.QueryRow(ctx, `select to_regclass('pgflow_wasm.reruns') is not null`).Scan(&exists); err != nil || !exists {
		return l, err
	}
	rows, err := pool.Query(ctx, `select run_id::text, rerun_of::text from pgflow_wasm.reruns
		where rerun_of = $1::text::uuid or run_id = $1::text::uuid order by created_at, run_id`, runID)
	if err != nil {
		return l, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, of string
		if err := rows.Scan(&id, &of); err != nil {
			return l, err
		}
		if id == runID {
			l.RerunOf = of
		} else {
			l.Reruns = append(l.Reruns, id)
		}
	}
	return l, rows.Err()
}

// AuditProcess records an action on a worker process (drain, undrain) in the audit.
func AuditProcess(ctx context.Context, tx pgx.Tx, action, processID, actor, detail string) error {
	_, err := tx.Exec(ctx, `insert into pgflow_wasm.operator_actions (action, process_id, actor, detail)
		values ($1, $2::text::uuid, $3, $4)`, action, processID, actor, detail)
	return err
}

func audit(ctx context.Context, tx pgx.Tx, action, runID, newRunID, actor, detail string) error {
	var newRun any
	if newRunID != "" {
		newRun = newRunID
	}
	_, err := tx.Exec(ctx, `insert into pgflow_wasm.operator_actions (action, run_id, new_run_id, actor, detail)
		values ($1, $2::text::uuid, $3::text::uuid, $4, $5)`, action, runID, newRun, actor, detail)
	return err
}
