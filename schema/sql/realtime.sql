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
-- {{REALTIME_VERSION}} is replaced by the installer.
CREATE SCHEMA IF NOT EXISTS realtime;

CREATE OR REPLACE FUNCTION realtime.send(payload jsonb, event text, topic text, private boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
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
    'pgflow-wasm realtime.send {{REALTIME_VERSION}}: NOTIFY on the topic channel with a small JSON event, never the output';
