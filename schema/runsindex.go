package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// RunsIndex is pgflow-wasm's one index on a table of pgflow's: the dashboard lists runs
// newest first, which pgflow's own indexes on pgflow.runs (run_id, flow_slug, status) can
// only give by sorting every run: without it a page's cost grows with the table.
const RunsIndex = "pgflow_wasm_runs_started_at_idx"

// RunsIndexSQL creates RunsIndex; an operator whose dashboard role may not create it runs
// this as the owner of pgflow.runs. CONCURRENTLY: writers (start_flow, the workers) are
// never blocked while it builds.
const RunsIndexSQL = "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + RunsIndex + " ON pgflow.runs (started_at DESC, run_id DESC)"

// RunsIndexState is what EnsureRunsIndex found or did.
type RunsIndexState string

const (
	RunsIndexPresent RunsIndexState = "kept"    // it was there and valid
	RunsIndexCreated RunsIndexState = "created" // it was missing
	RunsIndexRebuilt RunsIndexState = "rebuilt" // an interrupted build had left it invalid
	RunsIndexBusy    RunsIndexState = "busy"    // another pgflow-wasm process is building it now
	RunsIndexNoTable RunsIndexState = "no pgflow.runs"
)

// RunsIndexValid reports whether RunsIndex exists and is usable.
func RunsIndexValid(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (exists, valid bool, err error) {
	return indexValid(ctx, q, RunsIndex)
}

// indexValid reports whether index pgflow.<name> exists and is usable.
func indexValid(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string) (exists, valid bool, err error) {
	err = q.QueryRow(ctx, `SELECT i.indisvalid FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'pgflow' AND c.relname = $1`, name).Scan(&valid)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	return err == nil, valid, err
}

// EnsureRunsIndex creates RunsIndex when it is missing, or again when an interrupted
// concurrent build left it invalid (IF NOT EXISTS alone would keep that one, unused). conn
// must not be inside a transaction: CREATE INDEX CONCURRENTLY cannot run in one. A build
// waits for transactions already running on pgflow.runs, never blocks new ones.
func EnsureRunsIndex(ctx context.Context, conn *pgx.Conn) (RunsIndexState, error) {
	return ensureIndex(ctx, conn, RunsIndex, RunsIndexSQL)
}

// ensureIndex creates index pgflow.<name> with createSQL (CONCURRENTLY) as EnsureRunsIndex
// describes. Every such build holds one lock, LockKeyIndexBuild, which it only tries: two
// concurrent builds on pgflow.runs deadlock (each waits for the other's snapshot or table
// lock), an index being built looks just like one whose build was interrupted, and a build
// waits for every older snapshot, so a session waiting for a lock the build holds would
// deadlock with it.
func ensureIndex(ctx context.Context, conn *pgx.Conn, name, createSQL string) (RunsIndexState, error) {
	var table bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('pgflow.runs') IS NOT NULL`).Scan(&table); err != nil {
		return "", err
	}
	if !table {
		return RunsIndexNoTable, nil
	}
	if exists, valid, err := indexValid(ctx, conn, name); err != nil || (exists && valid) {
		return RunsIndexPresent, err
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, LockKeyIndexBuild).Scan(&locked); err != nil {
		return "", err
	}
	if !locked {
		return RunsIndexBusy, nil
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, LockKeyIndexBuild)
	// Read again under the lock: another process may have finished it meanwhile.
	exists, valid, err := indexValid(ctx, conn, name)
	switch {
	case err != nil:
		return "", err
	case exists && valid:
		return RunsIndexPresent, nil
	}
	state := RunsIndexCreated
	if exists {
		state = RunsIndexRebuilt
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS pgflow."+name); err != nil {
			return "", fmt.Errorf("dropping the invalid index pgflow.%s: %w", name, err)
		}
	}
	// A build waits for every older snapshot; a session holding one that then waits for the
	// build's table lock (a migration altering pgflow.runs) is a deadlock, which PostgreSQL
	// breaks by failing the build, whose invalid index is then dropped and built again.
	for try := 1; ; try++ {
		_, err := conn.Exec(ctx, createSQL)
		if err == nil {
			return state, nil
		}
		var pgErr *pgconn.PgError
		if try == 3 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return "", err
		}
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS pgflow."+name); err != nil {
			return "", fmt.Errorf("dropping the index pgflow.%s a deadlock left invalid: %w", name, err)
		}
	}
}
