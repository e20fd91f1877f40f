package runctl

import (
	"context"

	"github.com/jackc/pgx/v5"
)

const tablesLockKey int64 = 0x7067_6677_6173_6d04

// EnsureTables creates pgflow_wasm.operator_actions (the audit of every action) and
// pgflow_wasm.reruns (which run repeats which) when missing.
func EnsureTables(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `select to_regclass('pgflow_wasm.operator_actions') is not null and to_regclass('pgflow_wasm.reruns') is not null`).
			Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, tablesLockKey); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			create schema if not exists pgflow_wasm;
			create table if not exists pgflow_wasm.operator_actions (
			  id         bigint generated always as identity primary key,
			  at         timestamptz not null default now(),
			  action     text not null,       -- cancel, rerun
			  run_id     uuid not null,
			  new_run_id uuid,                -- rerun: the run it started
			  actor      text not null,       -- who asked: a user, the dashboard and its client's address
			  detail     text not null);
			comment on table pgflow_wasm.operator_actions is 'pgflow-wasm: every cancel and rerun, with who asked';
			create table if not exists pgflow_wasm.reruns (
			  run_id     uuid primary key,    -- the new run
			  rerun_of   uuid not null,       -- the run it repeats
			  actor      text not null,
			  created_at timestamptz not null default now());
			create index if not exists reruns_rerun_of_idx on pgflow_wasm.reruns (rerun_of);
			comment on table pgflow_wasm.reruns is 'pgflow-wasm: runs started by rerun, and the run each repeats'`)
		return err
	})
}
