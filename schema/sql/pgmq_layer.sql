-- pgflow-wasm layer: a pgmq-compatible queue API in plain SQL and PL/pgSQL.
--
-- Written for pgflow-wasm from pgmq's documented SQL API (function names, parameter names,
-- return types and semantics), for servers where the real pgmq extension is not available.
-- It covers what pgflow 0.8.1 and its workers call, plus a statement-level insert NOTIFY.
-- Every name is schema-qualified: pgflow calls these functions with search_path = ''.
--
-- The installer (schema/pgmq.go) runs this file either as the script of an extension named
-- pgmq (control file comment "pgflow-wasm layer: ...") or inside one transaction into a
-- plain schema pgmq. {{LAYER_VERSION}} is replaced by the installer.

-- One row per queue.
CREATE TABLE pgmq.meta (
    queue_name     varchar     NOT NULL UNIQUE,
    is_partitioned boolean     NOT NULL DEFAULT false,
    is_unlogged    boolean     NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- pgmq 1.5's message shape; pgflow 0.8.1 refuses to install without the headers column.
CREATE TYPE pgmq.message_record AS (
    msg_id      bigint,
    read_ct     integer,
    enqueued_at timestamptz,
    vt          timestamptz,
    message     jsonb,
    headers     jsonb
);

CREATE TYPE pgmq.queue_record AS (
    queue_name     varchar,
    is_partitioned boolean,
    is_unlogged    boolean,
    created_at     timestamptz
);

CREATE TYPE pgmq.metrics_result AS (
    queue_name           text,
    queue_length         bigint,
    newest_msg_age_sec   integer,
    oldest_msg_age_sec   integer,
    total_messages       bigint,
    scrape_time          timestamptz,
    queue_visible_length bigint
);

-- BEGIN marker: `pgflow-wasm db status` and the installer tell this layer from a real pgmq by it.
CREATE FUNCTION pgmq.pgflow_wasm_layer() RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT '{{LAYER_VERSION}}'::text $$;
COMMENT ON FUNCTION pgmq.pgflow_wasm_layer() IS
    'pgflow-wasm layer: pgmq-compatible SQL API written by pgflow-wasm, not the real pgmq extension';
-- END marker

-- Queue names become table names (q_<name>, a_<name>), so they are checked before any use.
CREATE FUNCTION pgmq.validate_queue_name(queue_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'invalid queue name: it is empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A queue name is 1 to 47 letters, digits or underscores.';
    END IF;
    IF length(queue_name) >= 48 THEN
        RAISE EXCEPTION 'invalid queue name "%": it is % characters long, the limit is 47',
            queue_name, length(queue_name)
            USING ERRCODE = 'name_too_long',
                  HINT = 'A queue name is 1 to 47 letters, digits or underscores.';
    END IF;
    IF queue_name !~ '^[A-Za-z0-9_]+$' THEN
        RAISE EXCEPTION 'invalid queue name "%": only letters, digits and underscores are allowed',
            queue_name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A queue name is 1 to 47 letters, digits or underscores.';
    END IF;
END
$$;

-- format_table_name('Orders', 'q') = 'q_orders': the table that holds a queue's messages.
CREATE FUNCTION pgmq.format_table_name(queue_name text, prefix text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM pgmq.validate_queue_name(queue_name);
    RETURN lower(prefix || '_' || queue_name);
END
$$;

CREATE FUNCTION pgmq.create(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    q_table text := pgmq.format_table_name(queue_name, 'q');
    a_table text := pgmq.format_table_name(queue_name, 'a');
BEGIN
    -- CREATE TABLE IF NOT EXISTS still races on the catalog when two sessions create the
    -- same queue at once (two workers compiling one flow): serialize per queue.
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtext('pgmq.create'), pg_catalog.hashtext(q_table));

    EXECUTE format(
        'CREATE TABLE IF NOT EXISTS pgmq.%I (
            msg_id      bigint      PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
            read_ct     integer     NOT NULL DEFAULT 0,
            enqueued_at timestamptz NOT NULL DEFAULT now(),
            vt          timestamptz NOT NULL,
            message     jsonb,
            headers     jsonb)', q_table);
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (vt)', q_table || '_vt_idx', q_table);

    EXECUTE format(
        'CREATE TABLE IF NOT EXISTS pgmq.%I (
            msg_id      bigint      PRIMARY KEY,
            read_ct     integer     NOT NULL DEFAULT 0,
            enqueued_at timestamptz NOT NULL DEFAULT now(),
            archived_at timestamptz NOT NULL DEFAULT now(),
            vt          timestamptz NOT NULL,
            message     jsonb,
            headers     jsonb)', a_table);
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (archived_at)',
        a_table || '_archived_at_idx', a_table);

    INSERT INTO pgmq.meta AS m (queue_name) VALUES ($1) ON CONFLICT DO NOTHING;
END
$$;

CREATE FUNCTION pgmq.list_queues() RETURNS SETOF pgmq.queue_record
LANGUAGE sql STABLE AS $$
    SELECT m.queue_name, m.is_partitioned, m.is_unlogged, m.created_at
    FROM pgmq.meta AS m
    ORDER BY m.created_at, m.queue_name
$$;

-- Every send variant ends here: one INSERT for the whole batch, ids returned in input order
-- (identity values are drawn in the INSERT's row order, which follows the input ordinality).
CREATE FUNCTION pgmq._enqueue(queue_name text, msgs jsonb[], headers jsonb[], visible_at timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF headers IS NOT NULL AND cardinality(headers) <> cardinality(msgs) THEN
        RAISE EXCEPTION 'send_batch: % headers for % messages: give one header object per message or none',
            cardinality(headers), cardinality(msgs)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH inserted AS (
            INSERT INTO pgmq.%I (vt, message, headers)
            SELECT $3, m.body, $2[m.ord]
            FROM unnest($1::jsonb[]) WITH ORDINALITY AS m(body, ord)
            ORDER BY m.ord
            RETURNING msg_id)
        SELECT msg_id FROM inserted ORDER BY msg_id',
        pgmq.format_table_name(queue_name, 'q'))
    USING msgs, headers, coalesce(visible_at, clock_timestamp());
END
$$;

-- Seconds of delay from now; a NULL delay means none.
CREATE FUNCTION pgmq._visible_after(delay integer) RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$
    SELECT clock_timestamp() + make_interval(secs => coalesce(delay, 0))
$$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, ARRAY[msg], NULL::jsonb[], clock_timestamp())
$$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, delay integer) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, ARRAY[msg], NULL::jsonb[], pgmq._visible_after(delay))
$$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, delay timestamptz) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, ARRAY[msg], NULL::jsonb[], delay)
$$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, ARRAY[msg], ARRAY[headers], clock_timestamp())
$$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay integer) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, ARRAY[msg], ARRAY[headers], pgmq._visible_after(delay))
$$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay timestamptz) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, ARRAY[msg], ARRAY[headers], delay)
$$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[]) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, msgs, NULL::jsonb[], clock_timestamp())
$$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay integer) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, msgs, NULL::jsonb[], pgmq._visible_after(delay))
$$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay timestamptz) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, msgs, NULL::jsonb[], delay)
$$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[]) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, msgs, headers, clock_timestamp())
$$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer)
RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, msgs, headers, pgmq._visible_after(delay))
$$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamptz)
RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT pgmq._enqueue(queue_name, msgs, headers, delay)
$$;

-- Visible messages (vt <= now), oldest id first, skipping rows other readers hold; each one
-- read becomes invisible for vt seconds and its read count goes up by one.
CREATE FUNCTION pgmq.read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}')
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql AS $$
BEGIN
    IF qty IS NULL OR qty < 0 THEN
        RAISE EXCEPTION 'read: qty must be 0 or more, got %', coalesce(qty::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH picked AS (
            SELECT msg_id FROM pgmq.%1$I
            WHERE vt <= clock_timestamp() AND ($3 = ''{}''::jsonb OR message @> $3)
            ORDER BY msg_id
            LIMIT $1
            FOR UPDATE SKIP LOCKED),
        updated AS (
            UPDATE pgmq.%1$I AS q
            SET vt = clock_timestamp() + make_interval(secs => $2), read_ct = q.read_ct + 1
            FROM picked
            WHERE q.msg_id = picked.msg_id
            RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers)
        SELECT * FROM updated ORDER BY msg_id',
        pgmq.format_table_name(queue_name, 'q'))
    USING qty, coalesce(vt, 0), coalesce(conditional, '{}'::jsonb);
END
$$;

-- read(), retried every poll_interval_ms until a message arrives or max_poll_seconds pass.
-- Each retry is a new statement, so it sees messages committed since the call started.
CREATE FUNCTION pgmq.read_with_poll(
    queue_name text,
    vt integer,
    qty integer,
    max_poll_seconds integer DEFAULT 5,
    poll_interval_ms integer DEFAULT 100,
    conditional jsonb DEFAULT '{}'
) RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => greatest(coalesce(max_poll_seconds, 0), 0));
    pause_ms integer := greatest(coalesce(poll_interval_ms, 100), 1);
    left_ms double precision;
BEGIN
    LOOP
        RETURN QUERY SELECT * FROM pgmq.read(queue_name, vt, qty, conditional);
        IF FOUND THEN
            RETURN;
        END IF;
        left_ms := extract(epoch FROM deadline - clock_timestamp()) * 1000;
        EXIT WHEN left_ms <= 0;
        PERFORM pg_sleep(least(pause_ms, left_ms) / 1000.0);
    END LOOP;
END
$$;

-- Reads and deletes at once (at-most-once delivery).
CREATE FUNCTION pgmq.pop(queue_name text, qty integer DEFAULT 1) RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'WITH picked AS (
            SELECT msg_id FROM pgmq.%1$I
            WHERE vt <= clock_timestamp()
            ORDER BY msg_id
            LIMIT $1
            FOR UPDATE SKIP LOCKED),
        removed AS (
            DELETE FROM pgmq.%1$I AS q USING picked
            WHERE q.msg_id = picked.msg_id
            RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers)
        SELECT * FROM removed ORDER BY msg_id',
        pgmq.format_table_name(queue_name, 'q'))
    USING coalesce(qty, 1);
END
$$;

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt timestamptz)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'UPDATE pgmq.%I SET vt = $2 WHERE msg_id = $1
         RETURNING msg_id, read_ct, enqueued_at, vt, message, headers',
        pgmq.format_table_name(queue_name, 'q'))
    USING msg_id, vt;
END
$$;

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt integer)
RETURNS SETOF pgmq.message_record
LANGUAGE sql AS $$
    SELECT * FROM pgmq.set_vt(queue_name, msg_id, pgmq._visible_after(vt))
$$;

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt timestamptz)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'WITH updated AS (
            UPDATE pgmq.%I SET vt = $2 WHERE msg_id = ANY($1)
            RETURNING msg_id, read_ct, enqueued_at, vt, message, headers)
        SELECT * FROM updated ORDER BY msg_id',
        pgmq.format_table_name(queue_name, 'q'))
    USING msg_ids, vt;
END
$$;

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt integer)
RETURNS SETOF pgmq.message_record
LANGUAGE sql AS $$
    SELECT * FROM pgmq.set_vt(queue_name, msg_ids, pgmq._visible_after(vt))
$$;

-- Archive = delete from q_<name> and insert into a_<name> in one statement.
CREATE FUNCTION pgmq.archive(queue_name text, msg_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'WITH moved AS (
            DELETE FROM pgmq.%I WHERE msg_id = ANY($1)
            RETURNING msg_id, read_ct, enqueued_at, vt, message, headers),
        archived AS (
            INSERT INTO pgmq.%I (msg_id, read_ct, enqueued_at, vt, message, headers)
            SELECT msg_id, read_ct, enqueued_at, vt, message, headers FROM moved
            RETURNING msg_id)
        SELECT msg_id FROM archived ORDER BY msg_id',
        pgmq.format_table_name(queue_name, 'q'), pgmq.format_table_name(queue_name, 'a'))
    USING msg_ids;
END
$$;

CREATE FUNCTION pgmq.archive(queue_name text, msg_id bigint) RETURNS boolean
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM pgmq.archive(queue_name, ARRAY[msg_id]))
$$;

CREATE FUNCTION pgmq.delete(queue_name text, msg_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'WITH removed AS (DELETE FROM pgmq.%I WHERE msg_id = ANY($1) RETURNING msg_id)
        SELECT msg_id FROM removed ORDER BY msg_id',
        pgmq.format_table_name(queue_name, 'q'))
    USING msg_ids;
END
$$;

CREATE FUNCTION pgmq.delete(queue_name text, msg_id bigint) RETURNS boolean
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM pgmq.delete(queue_name, ARRAY[msg_id]))
$$;

CREATE FUNCTION pgmq.purge_queue(queue_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    removed bigint;
BEGIN
    EXECUTE format('WITH d AS (DELETE FROM pgmq.%I RETURNING 1) SELECT count(*) FROM d',
        pgmq.format_table_name(queue_name, 'q'))
    INTO removed;
    RETURN removed;
END
$$;

CREATE FUNCTION pgmq.drop_queue(queue_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    q_table text := pgmq.format_table_name(queue_name, 'q');
    a_table text := pgmq.format_table_name(queue_name, 'a');
    existed boolean;
BEGIN
    existed := to_regclass(format('pgmq.%I', q_table)) IS NOT NULL;
    EXECUTE format('DROP TABLE IF EXISTS pgmq.%I', q_table);
    EXECUTE format('DROP TABLE IF EXISTS pgmq.%I', a_table);
    DELETE FROM pgmq.meta AS m WHERE m.queue_name = $1;
    IF NOT existed THEN
        RAISE NOTICE 'queue "%" does not exist', queue_name;
    END IF;
    RETURN existed;
END
$$;

CREATE FUNCTION pgmq.metrics(queue_name text) RETURNS pgmq.metrics_result
LANGUAGE plpgsql AS $$
DECLARE
    q_table text := pgmq.format_table_name(queue_name, 'q');
    result pgmq.metrics_result;
    seq text;
BEGIN
    EXECUTE format(
        'SELECT $1::text,
                count(*)::bigint,
                extract(epoch FROM now() - max(enqueued_at))::integer,
                extract(epoch FROM now() - min(enqueued_at))::integer,
                0::bigint,
                now(),
                count(*) FILTER (WHERE vt <= clock_timestamp())::bigint
         FROM pgmq.%I', q_table)
    INTO result
    USING queue_name;
    -- Messages ever sent = how far the identity sequence has gone.
    seq := pg_get_serial_sequence(format('pgmq.%I', q_table), 'msg_id');
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s', seq)
    INTO result.total_messages;
    RETURN result;
END
$$;

CREATE FUNCTION pgmq.metrics_all() RETURNS SETOF pgmq.metrics_result
LANGUAGE plpgsql AS $$
DECLARE
    q_name text;
BEGIN
    FOR q_name IN SELECT m.queue_name FROM pgmq.meta AS m ORDER BY m.queue_name LOOP
        RETURN NEXT pgmq.metrics(q_name);
    END LOOP;
END
$$;

-- Insert notifications (pgmq 1.8's enable_notify_insert): a statement-level trigger, so a
-- send_batch of 1,000 rows sends one NOTIFY. Channel "pgmq.q_<name>.INSERT" (as pgmq),
-- payload: the queue name. PostgreSQL folds equal notifications of one transaction into one.
CREATE FUNCTION pgmq._notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted_rows) THEN
        PERFORM pg_notify('pgmq.' || TG_TABLE_NAME || '.INSERT', TG_ARGV[0]);
    END IF;
    RETURN NULL;
END
$$;

-- Drops the notify trigger of a queue table if it has one (DROP TRIGGER IF EXISTS would
-- print a NOTICE on every first enable).
CREATE FUNCTION pgmq._drop_notify_trigger(q_table text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
               WHERE tgrelid = to_regclass(format('pgmq.%I', q_table)) AND tgname = 'pgmq_notify_insert') THEN
        EXECUTE format('DROP TRIGGER pgmq_notify_insert ON pgmq.%I', q_table);
    END IF;
END
$$;

-- throttle_interval_ms is accepted so callers written for pgmq 1.8+ work unchanged; this
-- layer does not throttle (one NOTIFY per inserting statement at most, see above).
CREATE FUNCTION pgmq.enable_notify_insert(queue_name text, throttle_interval_ms integer DEFAULT 0)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    q_table text := pgmq.format_table_name(queue_name, 'q');
BEGIN
    IF to_regclass(format('pgmq.%I', q_table)) IS NULL THEN
        RAISE EXCEPTION 'queue "%" does not exist', queue_name
            USING ERRCODE = 'undefined_table', HINT = 'Create it first with pgmq.create().';
    END IF;
    PERFORM pgmq._drop_notify_trigger(q_table);
    EXECUTE format(
        'CREATE TRIGGER pgmq_notify_insert AFTER INSERT ON pgmq.%I
         REFERENCING NEW TABLE AS inserted_rows
         FOR EACH STATEMENT EXECUTE FUNCTION pgmq._notify_insert(%L)', q_table, queue_name);
END
$$;

CREATE FUNCTION pgmq.disable_notify_insert(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    q_table text := pgmq.format_table_name(queue_name, 'q');
BEGIN
    IF to_regclass(format('pgmq.%I', q_table)) IS NULL THEN
        RAISE EXCEPTION 'queue "%" does not exist', queue_name USING ERRCODE = 'undefined_table';
    END IF;
    PERFORM pgmq._drop_notify_trigger(q_table);
END
$$;
