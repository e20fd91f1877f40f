// Package fetchlease lets only a few of the workers serving one queue read it at a time.
//
// Every worker that reads a queue runs its own fetch and outcome transactions. When many
// workers share a backlog, each gets a sliver of it: its fetches and its outcome batches
// shrink (tasks per outcome transaction fell from 73 with one worker to 10 with sixteen), so
// the fixed cost of each transaction (start_tasks is an SQL function, parsed and planned at
// every call) is shared by fewer tasks, and the database runs many more transactions at once,
// each slower (docs/benchmarks.md "Fetch leases"). A lease is the right to read a queue. A
// queue has Slots of them, session-level advisory locks on one connection per worker: a
// worker that dies drops its leases with its session.
//
// The worker keeps a lease while it keeps its handlers fed and gives it back when it cannot
// use it: its queue came back empty (so an idle queue holds no lease), or its handler slots
// stayed full for a while (handlers, not the database, are then the limit, and another
// worker should read). A lease is an optimisation and never a reason to stop work: when the
// lease session cannot be reached, the worker reads without one.
package fetchlease

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
)

// Key is the advisory lock key (the single bigint form) of one lease slot of a queue. The
// hash keeps leases of different queues apart; a clash (2^-64) would only make two queues
// share their leases.
func Key(queue string, slot int) int64 {
	h := fnv.New64a()
	h.Write([]byte("pgflow-wasm fetch lease\x00" + queue))
	return int64(h.Sum64() + uint64(slot))
}

// Config configures Leases.
type Config struct {
	// Pool gives the connection settings of the lease session (the session itself is a
	// connection of its own, outside the pool, so that its locks live as long as it does).
	Pool  *pgxpool.Pool
	Slots int // leases per queue; at least 1
	Log   *slog.Logger
}

// Leases holds the leases of one worker process. It is safe for concurrent use by the
// fetch loops of several queues.
type Leases struct {
	cfg  Config
	mu   sync.Mutex
	conn *pgx.Conn      // nil until first needed, and after it broke
	held map[string]int // queue -> slot held
}

// New returns Leases with none held. No connection is made until the first Acquire.
func New(cfg Config) *Leases {
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Leases{cfg: cfg, held: map[string]int{}}
}

// Held reports whether this worker holds a lease of queue.
func (l *Leases) Held(queue string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.held[queue]
	return ok
}

// Acquire takes a free lease of queue and reports whether this worker now holds one. An
// error means the lease session could not be used: the caller should read anyway.
func (l *Leases) Acquire(ctx context.Context, queue string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[queue]; ok {
		return true, nil
	}
	conn, err := l.session(ctx)
	if err != nil {
		return false, err
	}
	for slot := range l.cfg.Slots {
		var got bool
		if err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1::int8)`, Key(queue, slot)).Scan(&got); err != nil {
			l.broken(err)
			return false, fmt.Errorf("taking a fetch lease of queue %s: %w", queue, err)
		}
		if got {
			l.held[queue] = slot
			return true, nil
		}
	}
	return false, nil
}

// Release gives back the lease of queue, if held.
func (l *Leases) Release(ctx context.Context, queue string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	slot, ok := l.held[queue]
	if !ok {
		return nil
	}
	delete(l.held, queue)
	if l.conn == nil {
		return nil
	}
	if _, err := l.conn.Exec(ctx, `select pg_advisory_unlock($1::int8)`, Key(queue, slot)); err != nil {
		l.broken(err)
		return fmt.Errorf("giving back the fetch lease of queue %s: %w", queue, err)
	}
	return nil
}

// Close gives back every lease this worker holds and ends the lease session.
func (l *Leases) Close(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		// Given back before the close returns: a closing session's backend drops its locks
		// only when it exits, a moment after the client has gone.
		_, _ = l.conn.Exec(ctx, `select pg_advisory_unlock_all()`)
		_ = l.conn.Close(ctx)
		l.conn = nil
	}
	clear(l.held)
}

// session returns the lease session, connecting when there is none. Called with mu held.
func (l *Leases) session(ctx context.Context) (*pgx.Conn, error) {
	if l.conn != nil && !l.conn.IsClosed() {
		return l.conn, nil
	}
	clear(l.held) // a new session holds nothing
	conn, err := kit.OpenSession(ctx, l.cfg.Pool, "pgflow-wasm fetch leases")
	if err != nil {
		return nil, fmt.Errorf("opening the fetch lease session: %w", err)
	}
	l.conn = conn
	return conn, nil
}

// broken drops a session that failed a statement: the server may have dropped its locks
// (a restart, a cut connection), so none is counted as held. Called with mu held.
func (l *Leases) broken(err error) {
	if l.conn != nil {
		_ = l.conn.Close(context.Background())
		l.conn = nil
	}
	clear(l.held)
	l.cfg.Log.Debug("fetch lease session dropped", "error", err)
}
