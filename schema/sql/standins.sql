-- pgflow-wasm stand-ins for what pgflow 0.10+'s migrations need and plain PostgreSQL lacks.
-- Each section is installed only when the database has neither the real thing nor an
-- earlier stand-in; each is inert. Written for pgflow-wasm (the signatures follow the
-- documented APIs of pg_net, pg_cron and Supabase Vault; nothing is copied from them).

-- {{SECTION pg_net}}
-- pg_net sends HTTP requests from SQL. pgflow's ensure_workers() calls net.http_post to wake
-- Supabase Edge Functions; with this stand-in the call returns a request id and sends nothing.
CREATE SCHEMA IF NOT EXISTS net;
CREATE SEQUENCE IF NOT EXISTS net.pgflow_wasm_request_id;
CREATE OR REPLACE FUNCTION net.http_post(
    url text,
    body jsonb DEFAULT '{}'::jsonb,
    params jsonb DEFAULT '{}'::jsonb,
    headers jsonb DEFAULT '{"Content-Type": "application/json"}'::jsonb,
    timeout_milliseconds integer DEFAULT 5000
) RETURNS bigint LANGUAGE sql AS $$ SELECT nextval('net.pgflow_wasm_request_id') $$;
COMMENT ON FUNCTION net.http_post(text, jsonb, jsonb, jsonb, integer) IS
    'pgflow-wasm stand-in for pg_net: returns a request id, sends nothing';
CREATE OR REPLACE FUNCTION net.pgflow_wasm_standin() RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'pg_net 1' $$;

-- {{SECTION pg_cron}}
-- pg_cron runs SQL on a schedule. pgflow's migrations schedule pgflow_ensure_workers (wakes
-- Edge Functions) and pgflow_requeue_stalled_tasks (every 15 s). With this stand-in the jobs
-- are recorded in cron.job and never run: pgflow-wasm's stalled-task sweep is the recovery
-- (it applies requeue_stalled_tasks' rule to other workers' tasks itself).
CREATE SCHEMA IF NOT EXISTS cron;
CREATE TABLE IF NOT EXISTS cron.job (
    jobid bigserial PRIMARY KEY,
    jobname text UNIQUE,
    schedule text NOT NULL,
    command text NOT NULL,
    database text NOT NULL DEFAULT current_database(),
    username text NOT NULL DEFAULT current_user,
    active boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE cron.job IS 'pgflow-wasm stand-in for pg_cron: jobs scheduled here never run (active is false)';
CREATE TABLE IF NOT EXISTS cron.job_run_details (
    runid bigserial PRIMARY KEY,
    jobid bigint,
    status text,
    return_message text,
    start_time timestamptz,
    end_time timestamptz
);
CREATE OR REPLACE FUNCTION cron.schedule(job_name text, schedule text, command text) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO cron.job (jobname, schedule, command) VALUES (job_name, schedule, command)
    ON CONFLICT (jobname) DO UPDATE SET schedule = excluded.schedule, command = excluded.command
    RETURNING jobid
$$;
CREATE OR REPLACE FUNCTION cron.unschedule(job_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cron.job WHERE jobname = job_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'could not find valid entry for job ''%''', job_name;
    END IF;
    RETURN true;
END $$;
CREATE OR REPLACE FUNCTION cron.pgflow_wasm_standin() RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'pg_cron 1' $$;

-- {{SECTION vault}}
-- Supabase Vault keeps secrets. pgflow's ensure_workers() reads the Edge Functions' URL and
-- key from vault.decrypted_secrets; this stand-in holds none.
CREATE SCHEMA IF NOT EXISTS vault;
CREATE OR REPLACE VIEW vault.decrypted_secrets AS
    SELECT NULL::uuid AS id, NULL::text AS name, NULL::text AS description, NULL::text AS decrypted_secret WHERE false;
COMMENT ON VIEW vault.decrypted_secrets IS 'pgflow-wasm stand-in for Supabase Vault: holds no secret';
CREATE OR REPLACE FUNCTION vault.pgflow_wasm_standin() RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'vault 1' $$;
