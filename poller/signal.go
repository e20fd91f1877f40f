package poller

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Backoff spaces out polls of an idle queue with decorrelated jitter: each wait is random
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

// Wake is a level-triggered doorbell: any number of Rings before a wait count as one.
type Wake chan struct{}

// NewWake returns a Wake.
func NewWake() Wake { return make(Wake, 1) }

// Ring wakes the waiter, never blocking.
func (w Wake) Ring() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Listener holds one connection that LISTENs on each flow's queue-insert channel and rings
// that flow's Wake on every notification. After a (re)connect it rings every Wake, since
// messages may have arrived while it was away. Connection loss is retried with backoff.
type Listener struct {
	config   *pgx.ConnConfig
	channels map[string]Wake // channel -> doorbell
	log      *slog.Logger

	mu        sync.Mutex
	connected bool
}

// NewListener returns a Listener for the given channel -> Wake map.
func NewListener(config *pgx.ConnConfig, channels map[string]Wake, log *slog.Logger) *Listener {
	return &Listener{config: config, channels: channels, log: log}
}

// Connected reports whether the listening connection is up.
func (l *Listener) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected
}

func (l *Listener) setConnected(v bool) {
	l.mu.Lock()
	l.connected = v
	l.mu.Unlock()
}

// Run listens until ctx is done.
func (l *Listener) Run(ctx context.Context) {
	retry := Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, &retry)
		l.setConnected(false)
		if ctx.Err() != nil {
			return
		}
		wait := retry.Next()
		l.log.Warn("notify listener disconnected; reconnecting", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (l *Listener) listenOnce(ctx context.Context, retry *Backoff) error {
	conn, err := pgx.ConnectConfig(ctx, l.config)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for ch := range l.channels {
		if _, err := conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	l.setConnected(true)
	retry.Reset()
	for _, w := range l.channels {
		w.Ring()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if w, ok := l.channels[n.Channel]; ok {
			w.Ring()
		}
	}
}
