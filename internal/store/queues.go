package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Backlog is one pgmq queue's waiting work.
type Backlog struct {
	Queue   string
	Visible int64 // messages whose visibility time has passed: readable now
	// OldestAge is the seconds since the oldest visible message was enqueued; 0 when none.
	OldestAge float64
}

// rowsQuerier runs a query: a pool, a connection or a transaction.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// QueueBacklogs reads the backlog of the given queues in one statement, straight from
// pgmq's q_<queue> tables (pgmq's index on vt serves the filter): no pgmq function, no row
// lock, whatever the pgmq release.
func QueueBacklogs(ctx context.Context, db rowsQuerier, queues []string) ([]Backlog, error) {
	if len(queues) == 0 {
		return nil, nil
	}
	parts := make([]string, len(queues))
	args := make([]any, len(queues))
	for i, q := range queues {
		args[i] = q
		parts[i] = fmt.Sprintf(`select $%d::text, count(*), coalesce(extract(epoch from now() - min(enqueued_at)), 0)::float8
			from %s where vt <= now()`, i+1, schema.QueueTable(q))
	}
	rows, err := db.Query(ctx, strings.Join(parts, "\nunion all\n"), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the backlog of queues %s: %w", strings.Join(queues, ", "), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Backlog, error) {
		var b Backlog
		err := r.Scan(&b.Queue, &b.Visible, &b.OldestAge)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the backlog of queues %s: %w", strings.Join(queues, ", "), err)
	}
	return out, nil
}
