package live

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// State is what a probe reads: a fingerprint of everything a page shows that can change,
// the run channels whose events may change it, and whether it is still changing (a running
// run) or settled (polled less often).
type State struct {
	Fingerprint string
	Channels    []string
	Active      bool
}

// Probe reads a page's current State.
type Probe func(ctx context.Context) (State, error)

// Hub runs one watch per distinct page key, shared by every subscriber of that key.
type Hub struct {
	listener *Listener
	log      *slog.Logger
	// Active and Settled are the poll intervals of an active and a settled page.
	active, settled time.Duration

	mu      sync.Mutex
	watches map[string]*watch
	ctx     context.Context
}

// NewHub returns a hub whose watches poll every active interval while their page is
// active, every settled interval otherwise, and on every notification of their channels.
// Watches end when ctx does.
func NewHub(ctx context.Context, l *Listener, log *slog.Logger, active, settled time.Duration) *Hub {
	return &Hub{listener: l, log: log, active: active, settled: settled, watches: map[string]*watch{}, ctx: ctx}
}

type watch struct {
	key    string
	probe  Probe
	cancel context.CancelFunc
	last   Update // the last probe's outcome, zero before the first
	subs   map[*Watcher]struct{}
}

// Update is what a watch last read of its page: the fingerprint, or the error that kept it
// from reading (the database is unreachable).
type Update struct {
	Fingerprint string
	Err         error
}

// Watcher is one subscriber of a watch. C receives an Update whenever the page's fingerprint
// changes, when reading it starts failing and when it works again (and the current one
// right after Watch, once known); only the latest is kept.
type Watcher struct {
	C chan Update
	h *Hub
	w *watch
}

// Watch subscribes to the page key, starting its watch (with probe) if it is the first.
func (h *Hub) Watch(key string, probe Probe) *Watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.watches[key]
	if w == nil {
		ctx, cancel := context.WithCancel(h.ctx)
		w = &watch{key: key, probe: probe, cancel: cancel, subs: map[*Watcher]struct{}{}}
		h.watches[key] = w
		go h.run(ctx, w)
	}
	s := &Watcher{C: make(chan Update, 1), h: h, w: w}
	w.subs[s] = struct{}{}
	if w.last.Err != nil || w.last.Fingerprint != "" {
		s.C <- w.last
	}
	return s
}

// Close unsubscribes; the watch stops with its last subscriber.
func (s *Watcher) Close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(s.w.subs, s)
	if len(s.w.subs) == 0 && h.watches[s.w.key] == s.w {
		s.w.cancel()
		delete(h.watches, s.w.key)
	}
}

// Watches is how many pages are being watched (for tests).
func (h *Hub) Watches() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watches)
}

func (h *Hub) run(ctx context.Context, w *watch) {
	sub := h.listener.Subscribe()
	defer sub.Close()
	failed, lastErr := false, "" // the last probe failed (logged once, not at every poll), and why
	for {
		interval := h.settled
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := w.probe(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failed {
				h.log.Warn("dashboard: reading a live page's state failed; retrying every poll", "page", w.key, "error", err)
			}
			// Again when the reason changes: a server shutting down, then refusing connections.
			if !failed || err.Error() != lastErr {
				h.publish(w, Update{Err: err})
			}
			failed, lastErr = true, err.Error()
			// Poll as often as an active page: pages learn at once when it works again.
			interval = h.active
		default:
			if failed {
				h.log.Info("dashboard: reading a live page's state works again", "page", w.key)
				failed = false
			}
			sub.Set(st.Channels)
			if st.Active {
				interval = h.active
			}
			h.publish(w, Update{Fingerprint: st.Fingerprint})
		}
		select {
		case <-ctx.Done():
			return
		case <-sub.C:
			// Events come in bursts (a step completes, the next starts): gather them.
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		case <-time.After(interval):
		}
	}
}

// publish sends u to every subscriber unless it says what the last one said.
func (h *Hub) publish(w *watch, u Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u.Err == nil && w.last.Err == nil && u.Fingerprint == w.last.Fingerprint {
		return
	}
	w.last = u
	for s := range w.subs {
		select { // keep only the latest update
		case <-s.C:
		default:
		}
		s.C <- u
	}
}
