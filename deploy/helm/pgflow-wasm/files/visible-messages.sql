-- The messages waiting in the queues pgflow-wasm serves: visible ones only (vt <= now()),
-- so tasks a worker holds and retries still in their delay do not count. KEDA's postgresql
-- scaler runs it; the chart replaces __QUEUES__ with the values' keda.queues as
-- ARRAY['flow_a','flow_b']. pgmq (ours and the real one) keeps queue q in table pgmq.q_<q>;
-- a queue whose table does not exist yet counts 0. query_to_xml runs the count per table
-- without a function of our own in the database.
SELECT coalesce(sum((xpath('/row/n/text()', query_to_xml(
           format('SELECT count(*) AS n FROM pgmq.%I WHERE vt <= now()', 'q_' || lower(q)),
           false, true, '')))[1]::text::bigint), 0)::bigint AS visible
FROM unnest(__QUEUES__::text[]) AS q
WHERE to_regclass(format('pgmq.%I', 'q_' || lower(q))) IS NOT NULL
