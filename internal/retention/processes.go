package retention

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Worker processes register one row per process and one per pgflow.workers row it opened
// (package procctl); a reload opens new worker rows, so a long-lived process gathers them.
// A registration goes once its worker row has sent no heartbeat for the prune's age (the
// row is gone or long dead), and a process goes once it has no worker row left.
const (
	processWorkers  = "pgflow_wasm.process_workers"
	workerProcesses = "pgflow_wasm.worker_processes"

	goneWorkerRows = `not exists (select 1 from pgflow.workers w
		where w.worker_id = pw.worker_id and w.last_heartbeat_at >= $1)`
	emptyProcesses = `p.started_at < $1 and not exists (select 1 from pgflow_wasm.process_workers pw
		where pw.process_id = p.process_id)`
)

// hasProcessTables says whether the database has the registration tables (installed by
// `db install`, or made by the first worker that registered).
func hasProcessTables(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `select to_regclass('pgflow_wasm.process_workers') is not null
		and to_regclass('pgflow_wasm.worker_processes') is not null`).Scan(&ok)
	return ok, err
}

// pruneProcesses deletes the registrations of worker rows silent since cutoff, then the
// processes left without any, and adds what it deleted to c.
func pruneProcesses(ctx context.Context, tx pgx.Tx, cutoff time.Time, c *Counts) error {
	if ok, err := hasProcessTables(ctx, tx); err != nil || !ok {
		return err
	}
	tag, err := tx.Exec(ctx, `delete from pgflow_wasm.process_workers pw where `+goneWorkerRows, cutoff)
	if err != nil {
		return err
	}
	c.Own[processWorkers] += tag.RowsAffected()
	if tag, err = tx.Exec(ctx, `delete from pgflow_wasm.worker_processes p where `+emptyProcesses, cutoff); err != nil {
		return err
	}
	c.Own[workerProcesses] += tag.RowsAffected()
	return nil
}

// countProcesses says what pruneProcesses would delete.
func countProcesses(ctx context.Context, tx pgx.Tx, cutoff time.Time, c *Counts) error {
	if ok, err := hasProcessTables(ctx, tx); err != nil || !ok {
		return err
	}
	var rows, procs int64
	if err := tx.QueryRow(ctx, `select
		  (select count(*) from pgflow_wasm.process_workers pw where `+goneWorkerRows+`),
		  (select count(*) from pgflow_wasm.worker_processes p where p.started_at < $1 and not exists (
		     select 1 from pgflow_wasm.process_workers pw where pw.process_id = p.process_id and not (`+goneWorkerRows+`)))`,
		cutoff).Scan(&rows, &procs); err != nil {
		return err
	}
	c.Own[processWorkers] = rows
	c.Own[workerProcesses] = procs
	return nil
}
