// Package runs is the people's side of pgflow: start a run, follow it to its end through the
// run events realtime.send NOTIFYs (no busy polling), list runs, and show one run as a tree
// of steps and tasks. It needs only the database, not the flows file.
package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/uuidv4"
)

// Run is one pgflow run.
type Run struct {
	ID             string
	Flow           string
	Status         string // started, completed, failed
	Input          json.RawMessage
	Output         json.RawMessage // null until completed
	RemainingSteps int
	StartedAt      time.Time
	CompletedAt    *time.Time
	FailedAt       *time.Time
	// Error is the error message of the failed step (or task) of a failed run.
	Error string
}

// Done reports whether the run reached a final state.
func (r *Run) Done() bool { return r.Status == "completed" || r.Status == "failed" }

// Duration is how long the run took, or has taken so far.
func (r *Run) Duration() time.Duration {
	switch {
	case r.CompletedAt != nil:
		return r.CompletedAt.Sub(r.StartedAt)
	case r.FailedAt != nil:
		return r.FailedAt.Sub(r.StartedAt)
	}
	return time.Since(r.StartedAt)
}

// ErrFlowNotFound is returned when starting a flow the database does not know.
var ErrFlowNotFound = errors.New("flow not found")

// Start starts a run of flow with input (JSON) and returns its id.
func Start(ctx context.Context, pool *pgxpool.Pool, flow string, input json.RawMessage) (string, error) {
	return startWithID(ctx, pool, flow, input, uuidv4.New())
}

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// StartTx starts a run inside the caller's transaction: its first tasks are queued when
// the transaction commits, and never if it rolls back.
func StartTx(ctx context.Context, tx pgx.Tx, flow string, input json.RawMessage) (string, error) {
	return startWithID(ctx, tx, flow, input, uuidv4.New())
}

func startWithID(ctx context.Context, pool Querier, flow string, input json.RawMessage, id string) (string, error) {
	if !json.Valid(input) {
		return "", fmt.Errorf("the input is not valid JSON: %s", abbreviate(string(input), 80))
	}
	var exists bool
	if err := pool.QueryRow(ctx, `select exists (select 1 from pgflow.flows where flow_slug = $1)`, flow).Scan(&exists); err != nil {
		return "", fmt.Errorf("looking up flow %s: %w", flow, err)
	}
	if !exists {
		return "", fmt.Errorf("%w: %q is not compiled into this database (run `pgflow-wasm compile` or `serve` with the flows file that declares it)", ErrFlowNotFound, flow)
	}
	if _, err := pool.Exec(ctx, `select pgflow.start_flow(flow_slug => $1, input => $2::jsonb, run_id => $3::uuid)`,
		flow, string(input), id); err != nil {
		return "", fmt.Errorf("start_flow(%s): %w", flow, err)
	}
	return id, nil
}

// StartAndWait starts a run and waits for it to complete or fail. It LISTENs on the run's
// event channel before starting it, so no event is missed; if the database sends no events
// (another realtime.send than pgflow-wasm's) it still checks the run every recheck interval.
func StartAndWait(ctx context.Context, pool *pgxpool.Pool, flow string, input json.RawMessage, recheck time.Duration) (*Run, error) {
	id := uuidv4.New()
	return listenAndWait(ctx, pool, id, recheck, func() error {
		_, err := startWithID(ctx, pool, flow, input, id)
		return err
	})
}

// Wait waits for an existing run to complete or fail.
func Wait(ctx context.Context, pool *pgxpool.Pool, id string, recheck time.Duration) (*Run, error) {
	return listenAndWait(ctx, pool, id, recheck, nil)
}

// listenAndWait LISTENs on the run's channel on a pooled connection, runs then (if any, e.g.
// starting the run), and waits for the run's end.
func listenAndWait(ctx context.Context, pool *pgxpool.Pool, id string, recheck time.Duration, then func() error) (*Run, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "listen "+pgx.Identifier{Topic(id)}.Sanitize()); err != nil {
		return nil, err
	}
	// Leave the pooled connection clean for its next user.
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "unlisten *") }()
	if then != nil {
		if err := then(); err != nil {
			return nil, err
		}
	}
	return waitOn(ctx, pool, conn.Conn(), id, recheck)
}

func waitOn(ctx context.Context, pool *pgxpool.Pool, conn *pgx.Conn, id string, recheck time.Duration) (*Run, error) {
	if recheck <= 0 {
		recheck = 10 * time.Second
	}
	for {
		r, err := Get(ctx, pool, id)
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
func Topic(runID string) string { return "pgflow:run:" + runID }

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)

// Get reads one run.
func Get(ctx context.Context, pool *pgxpool.Pool, id string) (*Run, error) {
	if !uuidRE.MatchString(id) {
		return nil, fmt.Errorf("%q is not a run id: run ids are uuids such as 0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b (see `pgflow-wasm runs`)", id)
	}
	rows, err := pool.Query(ctx, runSelect+` where r.run_id = $1::uuid`, id)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("no run %s in this database", id)
	}
	return &list[0], nil
}

// Filter narrows List.
type Filter struct {
	Flow   string
	Status string
	Limit  int // default 20
}

// List returns the most recent runs first.
func List(ctx context.Context, pool *pgxpool.Pool, f Filter) ([]Run, error) {
	if f.Limit <= 0 {
		f.Limit = 20
	}
	switch f.Status {
	case "", "started", "completed", "failed":
	default:
		return nil, fmt.Errorf("unknown status %q: use started, completed or failed", f.Status)
	}
	rows, err := pool.Query(ctx, runSelect+`
		where ($1 = '' or r.flow_slug = $1) and ($2 = '' or r.status = $2)
		order by r.started_at desc, r.run_id limit $3`, f.Flow, f.Status, f.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRun)
}

const runSelect = `
select r.run_id::text, r.flow_slug, r.status, r.input, r.output, r.remaining_steps, r.started_at, r.completed_at, r.failed_at,
       coalesce((select coalesce(ss.error_message, '') from pgflow.step_states ss
                 where ss.run_id = r.run_id and ss.status = 'failed' order by ss.failed_at limit 1), '')
from pgflow.runs r`

func scanRun(row pgx.CollectableRow) (Run, error) {
	var r Run
	var input, output []byte
	err := row.Scan(&r.ID, &r.Flow, &r.Status, &input, &output, &r.RemainingSteps, &r.StartedAt, &r.CompletedAt, &r.FailedAt, &r.Error)
	r.Input, r.Output = input, output
	if r.Output == nil {
		r.Output = json.RawMessage("null")
	}
	return r, err
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ParseID checks a run id given by a user and returns it as given.
func ParseID(s string) (string, error) {
	if !uuidRE.MatchString(s) {
		return "", fmt.Errorf("%q is not a run id: run ids are uuids such as 0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b (see `pgflow-wasm runs`)", s)
	}
	return s, nil
}
