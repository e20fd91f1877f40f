// Package kit holds the small helpers the worker's services share: dedicated database
// sessions and the rollback of a pooled connection's failed transaction, the backoff of
// idle polls and retries, and random ids.
package kit

import (
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewUUID returns a random UUID in its canonical text form.
func NewUUID() string {
	var b [16]byte
	_, _ = cryptorand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Backoff spaces out polls of an idle queue (or retries) with decorrelated jitter: each wait is random
// between Min and three times the previous wait, capped at Max. Workers that go idle together
// drift apart instead of polling in lockstep. Reset returns to Min when work is found.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the next wait: Min right after a Reset (or at first), then growing.
func (b *Backoff) Next() time.Duration {
	if b.cur < b.Min {
		b.cur = b.Min
		return b.Min
	}
	hi := b.cur * 3
	if hi > b.Max {
		hi = b.Max
	}
	d := b.Min
	if hi > b.Min {
		d += rand.N(hi - b.Min)
	}
	b.cur = d
	return d
}

// Reset makes the next wait start from Min again.
func (b *Backoff) Reset() { b.cur = 0 }

// OpenSession opens one of the worker's dedicated database sessions: connections of their
// own, outside the pool, whose session state (advisory locks, LISTEN) lives exactly as long
// as they do. The liveness lock, fetch leases and the requeue guard each keep one. It
// connects with the pool's settings, named app in pg_stat_activity's application_name so
// that an operator can tell what each of the worker's sessions is for.
func OpenSession(ctx context.Context, pool *pgxpool.Pool, app string) (*pgx.Conn, error) {
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = app
	return pgx.ConnectConfig(ctx, cfg)
}

// Rollback ends a failed transaction on a pooled connection (a fetch's, or the completer's
// when a claim joins it), even where the caller's context is done. Where it cannot (the
// connection is gone), the pool closes the connection on its release, which ends the
// transaction too.
func Rollback(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, `rollback`)
}
