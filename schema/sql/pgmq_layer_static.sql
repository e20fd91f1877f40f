-- pgflow-wasm layer, update from 1.5.0+pgflow-wasm.1 to {{LAYER_VERSION}}: static statements.
--
-- Version 1 runs every queue statement through EXECUTE format(...), so PostgreSQL parses and
-- plans it at every call (0.2 ms of an archive or a send whose table work is 0.06 ms). Here
-- the hot functions become dispatchers that pgmq._build_dispatchers() writes from pgmq.meta:
-- one branch per queue holding the statement with its table named, which PL/pgSQL plans once
-- per session, and a dynamic fallback for a queue the dispatcher does not name (not made
-- through pgmq.create, created after the last build by a role that may not rebuild, or past
-- the cap). The branch and the fallback run the same template, so they cannot disagree.
--
-- The installer runs this file after the version 1 script: as the extension's update script
-- (a fresh CREATE EXTENSION chains both), or in the same transaction as the plain schema.

CREATE OR REPLACE FUNCTION pgmq.pgflow_wasm_layer() RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT '{{LAYER_VERSION}}'::text $$;

-- The dispatched functions: signature, result, checks run before the statement, and the
-- statement with %1$I for the queue table and %2$I for the archive table. Parameters are
-- referenced by position ($1 is always the queue name), so the same text works in a branch
-- (PL/pgSQL's own parameters) and in the fallback (EXECUTE ... USING every parameter in order).
CREATE TABLE pgmq._dispatched (
    signature text PRIMARY KEY,
    result    text NOT NULL,
    params    integer NOT NULL,
    checks    text NOT NULL DEFAULT '',
    statement text NOT NULL
);

INSERT INTO pgmq._dispatched (signature, result, params, checks, statement) VALUES
('_enqueue(queue_name text, msgs jsonb[], headers jsonb[], visible_at timestamptz)', 'SETOF bigint', 4,
$c$
    IF headers IS NOT NULL AND cardinality(headers) <> cardinality(msgs) THEN
        RAISE EXCEPTION 'send_batch: % headers for % messages: give one header object per message or none',
            cardinality(headers), cardinality(msgs)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    visible_at := coalesce(visible_at, clock_timestamp());
$c$,
$s$WITH inserted AS (
            INSERT INTO pgmq.%1$I (vt, message, headers)
            SELECT $4, m.body, $3[m.ord]
            FROM unnest($2::jsonb[]) WITH ORDINALITY AS m(body, ord)
            ORDER BY m.ord
            RETURNING msg_id)
        SELECT msg_id FROM inserted ORDER BY msg_id$s$),

('read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT ''{}'')', 'SETOF pgmq.message_record', 4,
$c$
    IF qty IS NULL OR qty < 0 THEN
        RAISE EXCEPTION 'read: qty must be 0 or more, got %', coalesce(qty::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    vt := coalesce(vt, 0);
    conditional := coalesce(conditional, '{}'::jsonb);
$c$,
$s$WITH picked AS (
            SELECT msg_id FROM pgmq.%1$I
            WHERE vt <= clock_timestamp() AND ($4 = '{}'::jsonb OR message @> $4)
            ORDER BY msg_id
            LIMIT $3
            FOR UPDATE SKIP LOCKED),
        updated AS (
            UPDATE pgmq.%1$I AS q
            SET vt = clock_timestamp() + make_interval(secs => $2), read_ct = q.read_ct + 1
            FROM picked
            WHERE q.msg_id = picked.msg_id
            RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers)
        SELECT * FROM updated ORDER BY msg_id$s$),

('set_vt(queue_name text, msg_id bigint, vt timestamptz)', 'SETOF pgmq.message_record', 3, '',
$s$UPDATE pgmq.%1$I SET vt = $3 WHERE msg_id = $2
        RETURNING msg_id, read_ct, enqueued_at, vt, message, headers$s$),

('set_vt(queue_name text, msg_ids bigint[], vt timestamptz)', 'SETOF pgmq.message_record', 3, '',
$s$WITH updated AS (
            UPDATE pgmq.%1$I SET vt = $3 WHERE msg_id = ANY($2)
            RETURNING msg_id, read_ct, enqueued_at, vt, message, headers)
        SELECT * FROM updated ORDER BY msg_id$s$),

('archive(queue_name text, msg_ids bigint[])', 'SETOF bigint', 2, '',
$s$WITH moved AS (
            DELETE FROM pgmq.%1$I WHERE msg_id = ANY($2)
            RETURNING msg_id, read_ct, enqueued_at, vt, message, headers),
        archived AS (
            INSERT INTO pgmq.%2$I (msg_id, read_ct, enqueued_at, vt, message, headers)
            SELECT msg_id, read_ct, enqueued_at, vt, message, headers FROM moved
            RETURNING msg_id)
        SELECT msg_id FROM archived ORDER BY msg_id$s$),

('delete(queue_name text, msg_ids bigint[])', 'SETOF bigint', 2, '',
$s$WITH removed AS (DELETE FROM pgmq.%1$I WHERE msg_id = ANY($2) RETURNING msg_id)
        SELECT msg_id FROM removed ORDER BY msg_id$s$);

-- The most queues a dispatcher names; the others take the fallback. Each branch is tested in
-- turn, so the cap bounds that walk and the size of the functions every session compiles.
-- STABLE, not IMMUTABLE: a plan must not keep the value when the function is replaced.
CREATE FUNCTION pgmq._dispatch_cap() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 200 $$;

-- The queues the dispatchers name: those whose tables exist, the ones created last first.
CREATE FUNCTION pgmq._dispatchable() RETURNS TABLE (queue_name text, q_table text, a_table text)
LANGUAGE sql STABLE AS $$
    SELECT m.queue_name, t.q_table, t.a_table
    FROM pgmq.meta AS m,
         LATERAL (SELECT pgmq.format_table_name(m.queue_name, 'q') AS q_table,
                         pgmq.format_table_name(m.queue_name, 'a') AS a_table) AS t
    WHERE to_regclass(format('pgmq.%I', t.q_table)) IS NOT NULL
      AND to_regclass(format('pgmq.%I', t.a_table)) IS NOT NULL
    ORDER BY m.created_at DESC, m.queue_name
    LIMIT pgmq._dispatch_cap()
$$;

-- Queues the dispatchers should name and do not: after pg_restore of the extension form, whose
-- scripts rebuild them before the queue list is restored (`db install` then rebuilds them).
CREATE FUNCTION pgmq._undispatched() RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    SELECT d.queue_name FROM pgmq._dispatchable() AS d
    WHERE strpos((SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                  WHERE p.oid = 'pgmq.archive(text, bigint[])'::pg_catalog.regprocedure),
                 format('WHEN %L THEN', d.queue_name)) = 0
$$;

-- Rewrites every dispatcher from pgmq.meta. Callers hold the queue lock (pgmq._lock_queues),
-- so two builds never replace one function at once.
CREATE FUNCTION pgmq._build_dispatchers() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    d pgmq._dispatched;
    q record;
    branches text;
    fallback text;
BEGIN
    FOR d IN SELECT * FROM pgmq._dispatched ORDER BY signature LOOP
        branches := '';
        FOR q IN SELECT * FROM pgmq._dispatchable()
        LOOP
            branches := branches || format(E'\n        WHEN %L THEN\n            RETURN QUERY %s;',
                q.queue_name, format(d.statement, q.q_table, q.a_table));
        END LOOP;
        fallback := format(E'RETURN QUERY EXECUTE format(%L,\n                pgmq.format_table_name($1, ''q''), pgmq.format_table_name($1, ''a''))\n            USING %s;',
            d.statement, (SELECT string_agg('$' || i, ', ' ORDER BY i) FROM generate_series(1, d.params) AS i));
        EXECUTE format($f$CREATE OR REPLACE FUNCTION pgmq.%s RETURNS %s LANGUAGE plpgsql AS %L$f$,
            d.signature, d.result,
            E'#variable_conflict use_column\nBEGIN' || d.checks ||
            CASE WHEN branches = '' THEN E'\n    ' || fallback
                 ELSE E'\n    CASE $1' || branches || E'\n        ELSE\n            ' || fallback || E'\n    END CASE;'
            END || E'\nEND\n');
    END LOOP;
END
$$;

-- A build needs to own the functions; a role that may create queues but not replace them
-- leaves the dispatchers as they are (its queue takes the fallback until the next build).
CREATE FUNCTION pgmq._rebuild_dispatchers() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmq._build_dispatchers();
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pgmq queue dispatchers not rebuilt: %', SQLERRM
        USING HINT = 'The owner of the pgmq functions rebuilds them with SELECT pgmq._build_dispatchers().';
END
$$;

-- One lock for every creation and removal of a queue in the database: a build reads them all,
-- and one lock cannot deadlock with another (version 1 locked per queue).
CREATE FUNCTION pgmq._lock_queues() RETURNS void
LANGUAGE sql AS $$ SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgmq.create'), 0) $$;

-- create and drop_queue keep their version 1 bodies for the tables, under the queue lock, and
-- rebuild the dispatchers when the list of queues changed.
ALTER FUNCTION pgmq.create(text) RENAME TO _create_tables;

CREATE FUNCTION pgmq.create(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    known boolean;
BEGIN
    PERFORM pgmq._lock_queues();
    known := EXISTS (SELECT 1 FROM pgmq.meta AS m WHERE m.queue_name = $1);
    PERFORM pgmq._create_tables(queue_name);
    IF NOT known THEN
        PERFORM pgmq._rebuild_dispatchers();
    END IF;
END
$$;

ALTER FUNCTION pgmq.drop_queue(text) RENAME TO _drop_tables;

CREATE FUNCTION pgmq.drop_queue(queue_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    existed boolean;
BEGIN
    PERFORM pgmq._lock_queues();
    existed := pgmq._drop_tables(queue_name);
    PERFORM pgmq._rebuild_dispatchers();
    RETURN existed;
END
$$;

-- The thin SQL-language wrappers (send, send_batch, the one-message archive, delete and
-- set_vt, set_vt by seconds) become PL/pgSQL with the same body: PostgreSQL plans an SQL
-- function's body at every call that cannot inline it (a set-returning call in a target list,
-- a PERFORM), which cost 20 us of a 60 us archive; PL/pgSQL keeps the plan for the session.
DO $$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.proname, pg_catalog.pg_get_function_arguments(p.oid) AS args,
               pg_catalog.pg_get_function_result(p.oid) AS result, p.proretset, btrim(p.prosrc, E' \n') AS body
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'pgmq'::regnamespace
          AND p.prolang = (SELECT oid FROM pg_catalog.pg_language WHERE lanname = 'sql')
          AND p.proname IN ('send', 'send_batch', 'archive', 'delete', 'set_vt')
    LOOP
        EXECUTE format('CREATE OR REPLACE FUNCTION pgmq.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L',
            f.proname, f.args, f.result,
            format(E'BEGIN\n    %s;\nEND\n',
                CASE WHEN f.proretset THEN 'RETURN QUERY ' || f.body ELSE 'RETURN (' || f.body || ')' END));
    END LOOP;
END
$$;

SELECT pgmq._build_dispatchers();
