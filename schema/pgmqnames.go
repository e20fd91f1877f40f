package schema

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// pgmq names a queue's tables and its insert channel after the queue lower-cased
// (format_table_name in pgmq and in our layer), while pgflow allows upper-case letters in a
// flow's slug, which names its queue. These are the one place that rule is written.

// QueueTable is a queue's message table, pgmq.q_<queue>, quoted for SQL.
func QueueTable(queue string) string {
	return pgx.Identifier{"pgmq", "q_" + strings.ToLower(queue)}.Sanitize()
}

// ArchiveTable is a queue's archive, pgmq.a_<queue>, quoted for SQL.
func ArchiveTable(queue string) string {
	return pgx.Identifier{"pgmq", "a_" + strings.ToLower(queue)}.Sanitize()
}

// QueueTableName is the message table's name without its schema (pg_class.relname).
func QueueTableName(queue string) string { return "q_" + strings.ToLower(queue) }

// InsertChannel is the channel inserts into a queue NOTIFY on: pgmq 1.8's
// enable_notify_insert names it after the queue table ("pgmq.q_<queue>.INSERT"), and so do
// our layer and the worker's own trigger (docs/database.md, "NOTIFY channels and payloads").
func InsertChannel(queue string) string { return "pgmq." + QueueTableName(queue) + ".INSERT" }
