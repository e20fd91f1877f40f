-- pgflow-wasm: the completion of a transactional SQL step's task, callable from the step's
-- own session (docs/database.md, section 7; docs/RATIONALE.md, "A step's SQL runs on a
-- session of its own role").
--
-- A transactional step's statements run on a connection logged in as the step's role,
-- which has no rights on pgflow's tables. Its task is completed inside the same
-- transaction through this function, which runs as its owner (the installer) and completes
-- exactly one task: the one a proof names. The proof is a keyed hash of the task's
-- identity and attempt, made by the worker with the key below; the handler never sees a
-- proof or the key, so it cannot complete (or fail) any task, its own included.
CREATE SCHEMA IF NOT EXISTS pgflow_wasm;
CREATE SCHEMA IF NOT EXISTS pgflow_wasm_step;
-- Only this schema is open to the step roles: it holds the one function.
GRANT USAGE ON SCHEMA pgflow_wasm_step TO PUBLIC;

CREATE TABLE IF NOT EXISTS pgflow_wasm.step_proof_key (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    -- 32 bytes of gen_random_uuid()'s strong randomness (244 random bits): core PostgreSQL
    -- 13+, no pgcrypto needed.
    key      bytea   NOT NULL DEFAULT decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex')
);
REVOKE ALL ON pgflow_wasm.step_proof_key FROM PUBLIC;
INSERT INTO pgflow_wasm.step_proof_key DEFAULT VALUES ON CONFLICT DO NOTHING;

-- One row: picked is false when the task is no longer started by this attempt (nothing was
-- called); otherwise status, attempts_count and error_message are complete_task's (null
-- when it returned no row).
CREATE OR REPLACE FUNCTION pgflow_wasm_step.complete_task(
    run_id uuid, step_slug text, task_index int, attempt int, output jsonb, proof text)
RETURNS TABLE (picked boolean, status text, attempts_count int, error_message text)
LANGUAGE plpgsql SECURITY DEFINER
-- pg_temp last: a temporary table or function of the caller's session shadows nothing.
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k bytea;
    msg bytea := convert_to(run_id::text || '/' || step_slug || '/' || task_index || '/' || attempt, 'UTF8');
BEGIN
    SELECT pk.key INTO k FROM pgflow_wasm.step_proof_key pk;
    IF k IS NULL OR proof IS DISTINCT FROM encode(sha256(k || sha256(k || msg)), 'hex') THEN
        RAISE EXCEPTION 'pgflow-wasm: the proof does not match task %/%/% attempt %: only the worker completes a task',
            run_id, step_slug, task_index, attempt USING ERRCODE = '42501';
    END IF;
    -- The run first, as pgflow's complete_task locks it: while it is locked no one fails,
    -- requeues or restarts its tasks, so the guard below stays true until the call.
    PERFORM 1 FROM pgflow.runs r WHERE r.run_id = complete_task.run_id FOR UPDATE;
    IF NOT EXISTS (SELECT 1 FROM pgflow.step_tasks st
                   WHERE st.run_id = complete_task.run_id AND st.step_slug = complete_task.step_slug
                     AND st.task_index = complete_task.task_index
                     AND st.status = 'started' AND st.attempts_count = complete_task.attempt) THEN
        RETURN QUERY SELECT false, NULL::text, NULL::int, NULL::text;
        RETURN;
    END IF;
    RETURN QUERY
        SELECT true, t.status::text, t.attempts_count, t.error_message
        FROM pgflow.complete_task(complete_task.run_id, complete_task.step_slug, complete_task.task_index, complete_task.output) t;
    IF NOT FOUND THEN
        RETURN QUERY SELECT true, NULL::text, NULL::int, NULL::text;
    END IF;
END
$$;
-- Every step role may call it (a database whose default privileges revoke EXECUTE from
-- PUBLIC too): the proof, not the grant, decides which task it completes.
GRANT EXECUTE ON FUNCTION pgflow_wasm_step.complete_task(uuid, text, int, int, jsonb, text) TO PUBLIC;
