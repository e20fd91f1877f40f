package runctl

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// EnsureTables creates pgflow_wasm.operator_actions (the audit of every action),
// pgflow_wasm.reruns (which run repeats which), pgflow_wasm.worker_processes (each worker
// process, its host and version, and whether an operator drained it) and
// pgflow_wasm.process_workers (the pgflow.workers rows of each process) when missing, and
// gives an audit table from before process actions their process_id column.
func EnsureTables(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `select to_regclass('pgflow_wasm.operator_actions') is not null and to_regclass('pgflow_wasm.reruns') is not null
			  and to_regclass('pgflow_wasm.process_workers') is not null
			  and exists (select 1 from pg_catalog.pg_attribute where attrelid = to_regclass('pgflow_wasm.operator_actions') and attname = 'process_id')`).
			Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, schema.LockKeyRunTables); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			create schema if not exists pgflow_wasm;
			create table if not exists pgflow_wasm.operator_actions (
			  id         bigint generated always as identity primary key,
			  at         timestamptz not null default now(),
			  action     text not null,       -- cancel, rerun, drain, undrain
			  run_id     uuid,                -- cancel, rerun: the run
			  new_run_id uuid,                -- rerun: the run it started
			  actor      text not null,       -- who asked: a user, the dashboard and its client's address
			  detail     text not null);
			alter table pgflow_wasm.operator_actions alter column run_id drop not null;
			alter table pgflow_wasm.operator_actions add column if not exists process_id uuid; -- drain, undrain: the worker process
			comment on table pgflow_wasm.operator_actions is 'pgflow-wasm: every cancel, rerun, drain and undrain, with who asked';
			create table if not exists pgflow_wasm.reruns (
			  run_id     uuid primary key,    -- the new run
			  rerun_of   uuid not null,       -- the run it repeats
			  actor      text not null,
			  created_at timestamptz not null default now());
			create index if not exists reruns_rerun_of_idx on pgflow_wasm.reruns (rerun_of);
			comment on table pgflow_wasm.reruns is 'pgflow-wasm: runs started by rerun, and the run each repeats';
			create table if not exists pgflow_wasm.worker_processes (
			  process_id uuid primary key,
			  host       text not null,
			  pid        integer not null,
			  version    text not null,
			  started_at timestamptz not null default now(),
			  drained_at timestamptz,         -- set by drain, cleared by undrain: the process takes no new tasks while set
			  drained_by text);
			comment on table pgflow_wasm.worker_processes is 'pgflow-wasm: worker processes, and which an operator drained';
			create table if not exists pgflow_wasm.process_workers (
			  worker_id  uuid primary key,    -- a pgflow.workers row (one per flow the process serves, new ones at each reload)
			  process_id uuid not null references pgflow_wasm.worker_processes on delete cascade);
			create index if not exists process_workers_process_id_idx on pgflow_wasm.process_workers (process_id);
			comment on table pgflow_wasm.process_workers is 'pgflow-wasm: the pgflow.workers rows of each worker process'`)
		return err
	})
}
