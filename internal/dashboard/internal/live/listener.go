// Package live tells the dashboard's open pages when what they show has changed.
//
// A Listener holds one PostgreSQL connection that LISTENs on the run channels
// (pgflow:run:<run_id>, where realtime.send NOTIFYs every run and step event) that some page
// currently cares about, shared by every open page. A Hub runs one watch per distinct page:
// it re-reads the page's state when one of its channels fires or its poll interval passes
// (the fallback for databases whose realtime.send does not NOTIFY, and for map tasks,
// which send no event), and tells the page's subscribers when the state's fingerprint
// changed.
package live

import (
	"context"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Listener is the one LISTEN connection, reconnected with backoff when it drops.
type Listener struct {
	config *pgx.ConnConfig
	log    *slog.Logger

	mu        sync.Mutex
	subs      map[string]map[*Subscription]struct{} // channel -> subscriptions
	all       map[*Subscription]struct{}
	connected bool
	listening []string      // channels the connection LISTENs to now
	kick      chan struct{} // the set of channels changed
}

// NewListener returns a Listener that connects with config once Run is called.
func NewListener(config *pgx.ConnConfig, log *slog.Logger) *Listener {
	return &Listener{config: config, log: log, subs: map[string]map[*Subscription]struct{}{},
		all: map[*Subscription]struct{}{}, kick: make(chan struct{}, 1)}
}

// Subscription is interest in a set of channels. C receives a value (level-triggered: many
// notifications before a read count as one) when any of them is notified, and after the
// connection came back (notifications may have been missed while it was away).
type Subscription struct {
	C        chan struct{}
	l        *Listener
	channels []string
}

// Subscribe returns a subscription to no channel yet; Set chooses them.
func (l *Listener) Subscribe() *Subscription {
	s := &Subscription{C: make(chan struct{}, 1), l: l}
	l.mu.Lock()
	l.all[s] = struct{}{}
	l.mu.Unlock()
	return s
}

// Set replaces the channels of the subscription.
func (s *Subscription) Set(channels []string) {
	l := s.l
	l.mu.Lock()
	changed := false
	for _, ch := range s.channels {
		if !slices.Contains(channels, ch) {
			delete(l.subs[ch], s)
			if len(l.subs[ch]) == 0 {
				delete(l.subs, ch)
				changed = true
			}
		}
	}
	for _, ch := range channels {
		if l.subs[ch] == nil {
			l.subs[ch] = map[*Subscription]struct{}{}
			changed = true
		}
		l.subs[ch][s] = struct{}{}
	}
	s.channels = slices.Clone(channels)
	l.mu.Unlock()
	if changed {
		ring(l.kick)
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.Set(nil)
	s.l.mu.Lock()
	delete(s.l.all, s)
	s.l.mu.Unlock()
}

// Connected reports whether the LISTEN connection is up.
func (l *Listener) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected
}

// Listening returns the channels the connection LISTENs to now, sorted (for tests and
// diagnostics); nil while it is down.
func (l *Listener) Listening() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.listening)
}

func ring(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run keeps the connection until ctx ends.
func (l *Listener) Run(ctx context.Context) {
	wait := time.Duration(0)
	for ctx.Err() == nil {
		err := l.session(ctx)
		l.mu.Lock()
		l.connected, l.listening = false, nil
		l.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		// Back off 0.2 s doubling to 5 s, with jitter; a session that got going resets it.
		wait = min(max(2*wait, 200*time.Millisecond), 5*time.Second)
		d := wait/2 + rand.N(wait/2+1)
		l.log.Warn("dashboard: the LISTEN connection failed; pages fall back to polling until it is back", "error", err, "retry_in", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// session connects, listens to the wanted channels, and delivers notifications until the
// connection fails.
func (l *Listener) session(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.config)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	listening := map[string]bool{}
	first := true
	for {
		if err := l.sync(ctx, conn, listening); err != nil {
			return err
		}
		if first {
			// Pages may have missed events while there was no connection.
			first = false
			l.mu.Lock()
			l.connected = true
			for s := range l.all {
				ring(s.C)
			}
			l.mu.Unlock()
		}
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-l.kick:
				cancel()
			case <-wctx.Done():
			}
		}()
		n, err := conn.WaitForNotification(wctx)
		kicked := wctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n != nil {
			l.deliver(n.Channel)
		}
		if err != nil && !kicked {
			return err
		}
	}
}

// sync LISTENs to newly wanted channels and UNLISTENs from unwanted ones.
func (l *Listener) sync(ctx context.Context, conn *pgx.Conn, listening map[string]bool) error {
	l.mu.Lock()
	want := slices.Collect(maps.Keys(l.subs))
	l.mu.Unlock()
	for _, ch := range want {
		if !listening[ch] {
			if err := schema.ListenEvents(ctx, conn, ch); err != nil {
				return err
			}
			listening[ch] = true
		}
	}
	for ch := range listening {
		if !slices.Contains(want, ch) {
			if err := schema.UnlistenEvents(ctx, conn, ch); err != nil {
				return err
			}
			delete(listening, ch)
		}
	}
	l.mu.Lock()
	l.listening = slices.Sorted(maps.Keys(listening))
	l.mu.Unlock()
	return nil
}

func (l *Listener) deliver(channel string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[channel] {
		ring(s.C)
	}
}
