package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// ErrFlowNotFound is returned when starting a flow the database does not know.
var ErrFlowNotFound = pgflowtype.ErrFlowNotFound

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Start starts a run of flow with input (JSON) and returns its id. Given a transaction, it
// starts the run inside it: its first tasks are queued when the transaction commits, and
// never if it rolls back.
func Start(ctx context.Context, q Querier, flow string, input json.RawMessage) (string, error) {
	return startWithID(ctx, q, flow, input, kit.NewUUID())
}

func startWithID(ctx context.Context, q Querier, flow string, input json.RawMessage, id string) (string, error) {
	if !json.Valid(input) {
		return "", fmt.Errorf("the input is not valid JSON: %s", abbreviate(string(input), 80))
	}
	var exists bool
	if err := q.QueryRow(ctx, `select exists (select 1 from pgflow.flows where flow_slug = $1)`, flow).Scan(&exists); err != nil {
		return "", fmt.Errorf("looking up flow %s: %w", flow, err)
	}
	if !exists {
		return "", fmt.Errorf("%w: %q is not compiled into this database (run `pgflow-wasm compile` or `serve` with the flows file that declares it)", ErrFlowNotFound, flow)
	}
	if _, err := q.Exec(ctx, `select pgflow.start_flow(flow_slug => $1, input => $2::jsonb, run_id => $3::uuid)`,
		flow, string(input), id); err != nil {
		return "", fmt.Errorf("start_flow(%s): %w", flow, err)
	}
	return id, nil
}

// StartAndWait starts a run and waits for it to complete or fail. It LISTENs on the run's
// event channel before starting it, so no event is missed; if the database sends no events
// (another realtime.send than pgflow-wasm's) it still checks the run every recheck interval.
func (s *Store) StartAndWait(ctx context.Context, flow string, input json.RawMessage, recheck time.Duration) (*pgflowtype.Run, error) {
	id := kit.NewUUID()
	return s.listenAndWait(ctx, id, recheck, func(conn *pgx.Conn) error {
		_, err := startWithID(ctx, conn, flow, input, id)
		return err
	})
}

// Wait waits for an existing run to complete or fail.
func (s *Store) Wait(ctx context.Context, id string, recheck time.Duration) (*pgflowtype.Run, error) {
	id, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	return s.listenAndWait(ctx, id, recheck, nil)
}

// listenAndWait LISTENs on the run's channel on a pooled connection, runs then (if any, e.g.
// starting the run), and waits for the run's end. Everything runs on that one connection: a
// wait that took a second one from the pool would deadlock once as many waits as the pool
// has connections held them all (a server starting and awaiting runs per request).
func (s *Store) listenAndWait(ctx context.Context, id string, recheck time.Duration, then func(*pgx.Conn) error) (*pgflowtype.Run, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// Only the run's end wakes this wait: its step events would be NOTIFYs that make every
	// completing transaction commit one at a time (docs/RATIONALE.md "pgflowtype.Run events only for
	// listeners").
	if err := schema.ListenRunEnd(ctx, conn, Topic(id)); err != nil {
		return nil, err
	}
	// Leave the pooled connection clean for its next user.
	defer func() { _ = schema.UnlistenEvents(context.WithoutCancel(ctx), conn, "") }()
	if then != nil {
		if err := then(conn.Conn()); err != nil {
			return nil, err
		}
	}
	return s.waitOn(ctx, conn.Conn(), id, recheck)
}

func (s *Store) waitOn(ctx context.Context, conn *pgx.Conn, id string, recheck time.Duration) (*pgflowtype.Run, error) {
	if recheck <= 0 {
		recheck = 10 * time.Second
	}
	for {
		r, err := getRun(ctx, conn, id)
		if err != nil {
			return nil, err
		}
		if r.Done() {
			return r, nil
		}
		// Wait for the run's next event; the timeout is only a safety net.
		for {
			wctx, cancel := context.WithTimeout(ctx, recheck)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return nil, err
			}
			if err != nil || isFinalEvent(n.Payload) {
				break
			}
		}
	}
}

// isFinalEvent reports whether a run event ends the run. Unparseable payloads count as
// final so the caller looks at the run instead of missing its end.
func isFinalEvent(payload string) bool {
	var ev struct {
		Event string `json:"event"`
	}
	if json.Unmarshal([]byte(payload), &ev) != nil {
		return true
	}
	return ev.Event == "run:completed" || ev.Event == "run:failed"
}

// Topic is the channel (and realtime topic) of a run's events.
func Topic(runID string) string { return schema.RunChannel(runID) }

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
