-- pgflow-wasm: realtime.send for servers without Supabase Realtime.
--
-- pgflow 0.8.1 calls realtime.send(payload, event, topic, private) on every run and step
-- transition, some calls inside RETURNING lists. Here it becomes one NOTIFY on the channel
-- named by the topic ("pgflow:run:<run_id>"), so a client LISTENs to exactly one run.
-- The payload is a small JSON object, never the step or run output:
--   {"event": "step:double:completed", "run_id": "...", "flow_slug": "...",
--    "step_slug": "double", "status": "completed"}        (absent keys are left out)
-- Every field is cut to a fixed length, so a payload stays far below NOTIFY's 8000 bytes.
-- It never raises: a lost event must not roll back a task's completion.
--
-- It NOTIFYs only channels someone listens to, as registered by realtime.pgflow_wasm_listen,
-- and of a channel whose every listener waits only for the run's end (start --wait), only
-- run:completed and run:failed.
-- A transaction that sent a NOTIFY takes a database-wide lock at commit and holds it through
-- the commit's flush, so every completing transaction of every worker would commit one at a
-- time for events nobody reads (docs/RATIONALE.md, "Run events only for listeners").
-- {{REALTIME_VERSION}} is replaced by the installer.
CREATE SCHEMA IF NOT EXISTS realtime;

-- One row per channel and listening backend. Rows of backends that ended without
-- unlistening are removed by the next registration; until then they only cost a NOTIFY.
CREATE TABLE IF NOT EXISTS realtime.pgflow_wasm_listeners (
    channel text NOT NULL,
    pid integer NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, pid)
);
-- Version 3: a listener may want only the run's end.
ALTER TABLE realtime.pgflow_wasm_listeners ADD COLUMN IF NOT EXISTS run_end_only boolean NOT NULL DEFAULT false;
COMMENT ON TABLE realtime.pgflow_wasm_listeners IS
    'pgflow-wasm: the channels realtime.send NOTIFYs, registered by realtime.pgflow_wasm_listen(channel)';
-- Every role whose transactions call realtime.send (pgflow's functions) reads it.
GRANT SELECT ON realtime.pgflow_wasm_listeners TO PUBLIC;

-- realtime.pgflow_wasm_listen LISTENs on a channel and registers the session as its listener,
-- so realtime.send NOTIFYs it: every event, or with run_end_only only run:completed and
-- run:failed. A transaction that called realtime.send before this one committed may not
-- notify: read the state the channel is about after listening.
DROP FUNCTION IF EXISTS realtime.pgflow_wasm_listen(text); -- version 2's, without run_end_only
CREATE OR REPLACE FUNCTION realtime.pgflow_wasm_listen(topic text, run_end_only boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM realtime.pgflow_wasm_listeners l
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = l.pid);
    -- Registered twice, the session hears what either registration asked for.
    INSERT INTO realtime.pgflow_wasm_listeners AS l (channel, pid, run_end_only)
    VALUES (topic, pg_backend_pid(), pgflow_wasm_listen.run_end_only)
    ON CONFLICT (channel, pid) DO UPDATE SET run_end_only = l.run_end_only AND excluded.run_end_only;
    EXECUTE format('LISTEN %I', topic);
END
$$;

-- realtime.pgflow_wasm_unlisten stops listening on a channel, or on every channel (NULL).
CREATE OR REPLACE FUNCTION realtime.pgflow_wasm_unlisten(topic text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM realtime.pgflow_wasm_listeners
     WHERE pid = pg_backend_pid() AND (topic IS NULL OR channel = topic);
    IF topic IS NULL THEN
        UNLISTEN *;
    ELSE
        EXECUTE format('UNLISTEN %I', topic);
    END IF;
END
$$;

GRANT EXECUTE ON FUNCTION realtime.pgflow_wasm_listen(text, boolean), realtime.pgflow_wasm_unlisten(text) TO PUBLIC;

CREATE OR REPLACE FUNCTION realtime.send(payload jsonb, event text, topic text, private boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM realtime.pgflow_wasm_listeners l
                    WHERE l.channel = topic AND (NOT l.run_end_only OR event IN ('run:completed', 'run:failed'))) THEN
        RETURN;
    END IF;
    PERFORM pg_catalog.pg_notify(topic, pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
        'event',     left(event, 160),
        'run_id',    left(payload ->> 'run_id', 64),
        'flow_slug', left(payload ->> 'flow_slug', 160),
        'step_slug', left(payload ->> 'step_slug', 160),
        'status',    left(payload ->> 'status', 32)))::text);
EXCEPTION WHEN OTHERS THEN
    -- Nothing to do: events are best effort (a too long topic, a non-object payload...).
    RETURN;
END
$$;

COMMENT ON FUNCTION realtime.send(jsonb, text, text, boolean) IS
    'pgflow-wasm realtime.send {{REALTIME_VERSION}}: NOTIFY on the topic channel with a small JSON event, never the output, while someone listens (for the run''s end only, if every listener asked for that)';
