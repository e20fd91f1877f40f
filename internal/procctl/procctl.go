// Package procctl is what an operator does to a worker process as a whole: drain it (it
// takes no new task of any flow it serves, finishes the running ones, and stays up) and
// undrain it (it takes tasks again). pgflow's own deprecation is per pgflow.workers row, one
// per flow, and for good; a drain is one flag on the process, undone by clearing it.
//
// A worker registers its process in pgflow_wasm.worker_processes (host, pid, version) and
// each of its pgflow.workers rows in pgflow_wasm.process_workers, then reads the flag at
// every heartbeat interval. Every drain and undrain is recorded in
// pgflow_wasm.operator_actions with who asked, as cancel and rerun are (package runctl).
package procctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/runctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
)

// ErrNotFound is returned for an id that is neither a registered process nor one of its
// worker rows.
var ErrNotFound = errors.New("no such worker process")

// Process is one worker process as it registers itself.
type Process struct {
	ID      string
	Host    string
	PID     int
	Version string
}

// Self describes this process under a fresh id.
func Self(id, version string) Process {
	host, _ := os.Hostname()
	return Process{ID: id, Host: host, PID: os.Getpid(), Version: version}
}

// Register records the process (once) and its pgflow.workers rows.
func Register(ctx context.Context, pool *pgxpool.Pool, p Process, workerIDs []string) error {
	if err := runctl.EnsureTables(ctx, pool); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into pgflow_wasm.worker_processes (process_id, host, pid, version)
			values ($1::text::uuid, $2, $3, $4) on conflict (process_id) do nothing`, p.ID, p.Host, p.PID, p.Version); err != nil {
			return fmt.Errorf("registering worker process %s: %w", p.ID, err)
		}
		_, err := tx.Exec(ctx, `insert into pgflow_wasm.process_workers (worker_id, process_id)
			select unnest($1::text[]::uuid[]), $2::text::uuid on conflict (worker_id) do nothing`, workerIDs, p.ID)
		return err
	})
}

// Drained reads whether an operator drained the process.
func Drained(ctx context.Context, pool *pgxpool.Pool, processID string) (bool, error) {
	var drained bool
	err := pool.QueryRow(ctx, `select drained_at is not null from pgflow_wasm.worker_processes where process_id = $1::text::uuid`,
		processID).Scan(&drained)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return drained, err
}

// Changed is what Drain or Undrain did.
type Changed struct {
	ProcessID string
	Host      string
	Changed   bool // false: it already was drained (Drain) or was not (Undrain)
}

// Drain sets the process's drain flag: within a heartbeat interval it stops taking tasks of
// every flow it serves; its running tasks finish. id is the process's id or the id of one
// of its pgflow.workers rows.
func Drain(ctx context.Context, pool *pgxpool.Pool, id, actor string) (Changed, error) {
	return set(ctx, pool, id, actor, true)
}

// Undrain clears the drain flag: the process takes tasks again.
func Undrain(ctx context.Context, pool *pgxpool.Pool, id, actor string) (Changed, error) {
	return set(ctx, pool, id, actor, false)
}

func set(ctx context.Context, pool *pgxpool.Pool, id, actor string, drain bool) (Changed, error) {
	var c Changed
	uid, ok := store.ParseID(id)
	if !ok {
		return c, fmt.Errorf("%q is not a worker process id or worker id (a uuid): %w", id, ErrNotFound)
	}
	if err := runctl.EnsureTables(ctx, pool); err != nil {
		return c, err
	}
	action := map[bool]string{true: "drain", false: "undrain"}[drain]
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var was *time.Time
		err := tx.QueryRow(ctx, `select p.process_id::text, p.host, p.drained_at from pgflow_wasm.worker_processes p
			where p.process_id = $1::uuid
			   or p.process_id = (select process_id from pgflow_wasm.process_workers where worker_id = $1::uuid)
			for update`, uid).Scan(&c.ProcessID, &c.Host, &was)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s is neither a worker process nor a worker row of one (pgflow-wasm workers register both; pgflow's own workers have neither): %w", uid, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if c.Changed = (was == nil) == drain; !c.Changed {
			return nil
		}
		if drain {
			_, err = tx.Exec(ctx, `update pgflow_wasm.worker_processes set drained_at = clock_timestamp(), drained_by = $2
				where process_id = $1::text::uuid`, c.ProcessID, actor)
		} else {
			_, err = tx.Exec(ctx, `update pgflow_wasm.worker_processes set drained_at = null, drained_by = null
				where process_id = $1::text::uuid`, c.ProcessID)
		}
		if err != nil {
			return err
		}
		detail := "process on " + c.Host + " takes no new tasks"
		if !drain {
			detail = "process on " + c.Host + " takes tasks again"
		}
		return runctl.AuditProcess(ctx, tx, action, c.ProcessID, actor, detail)
	})
	return c, err
}
