-- pgflow-wasm: the attempts of a task that pgflow's own row forgets. pgflow keeps one row per
-- task and overwrites its started_at, last_worker_id and error_message on every retry; a row
-- here is written in the same transaction as each fail_task of pgflow-wasm's (a handler's
-- failure) and each requeue of its recovery (a dead worker's task, a lost fetch reply), so
-- every attempt that did not end the task keeps its start, end, worker and error or reason. The attempt that ends a task is the one on pgflow's row.
CREATE SCHEMA IF NOT EXISTS pgflow_wasm;

CREATE TABLE IF NOT EXISTS pgflow_wasm.task_attempts (
    run_id        uuid        NOT NULL,
    step_slug     text        NOT NULL,
    task_index    int         NOT NULL,
    attempt       int         NOT NULL,   -- pgflow's attempts_count while it ran (1 = first)
    worker_id     uuid,                   -- step_tasks.last_worker_id while it ran
    started_at    timestamptz,
    failed_at     timestamptz NOT NULL DEFAULT now(),
    error_message text,
    PRIMARY KEY (run_id, step_slug, task_index, attempt)
);

-- Pruned by age (the worker's sweep deletes rows older than --attempt-history).
CREATE INDEX IF NOT EXISTS task_attempts_failed_at_idx ON pgflow_wasm.task_attempts (failed_at);

COMMENT ON TABLE pgflow_wasm.task_attempts IS
    'pgflow-wasm: failed attempts of tasks (pgflow keeps only the last on step_tasks), written with each fail_task, pruned by age';
