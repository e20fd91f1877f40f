-- pgflow-wasm bookkeeping: which of pgflow's migration files this database has applied.
CREATE SCHEMA IF NOT EXISTS pgflow_wasm;

CREATE TABLE IF NOT EXISTS pgflow_wasm.schema_migrations (
    name            text        PRIMARY KEY,  -- file name, e.g. 20250429164909_pgflow_initial.sql
    sha256          text        NOT NULL,     -- hex digest of the file as shipped (before any skip)
    pgflow_version  text        NOT NULL,     -- version of the npm package the file came from
    skipped_pgmq_create_extension boolean NOT NULL DEFAULT false,
    applied_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

COMMENT ON TABLE pgflow_wasm.schema_migrations IS
    'pgflow-wasm: pgflow migration files applied by `pgflow-wasm db install`, one row per file';

-- Every extension whose CREATE EXTENSION statement was skipped: pgmq installed as a plain
-- schema, pg_net and pg_cron replaced by pgflow-wasm's stand-ins (schema/sql/standins.sql).
ALTER TABLE pgflow_wasm.schema_migrations ADD COLUMN IF NOT EXISTS skipped_extensions text[] NOT NULL DEFAULT '{}';
