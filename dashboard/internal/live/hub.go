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
	last   string // last fingerprint, "" before the first probe
	subs   map[*Watcher]struct{}
	failed bool // the last probe failed (logged once, not at every poll)
}

// Watcher is one subscriber of a watch. C receives the page's fingerprint whenever it
// changes (and the current one right after Watch, once known); only the latest is kept.
type Watcher struct {
	C chan string
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
	s := &Watcher{C: make(chan string, 1), h: h, w: w}
	w.subs[s] = struct{}{}
	if w.last != "" {
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
	for {
		interval := h.settled
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := w.probe(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !w.failed {
				h.log.Warn("dashboard: reading a live page's state failed; retrying at every poll", "page", w.key, "error", err)
				w.failed = true
			}
		default:
			if w.failed {
				h.log.Info("dashboard: reading a live page's state works again", "page", w.key)
				w.failed = false
			}
			sub.Set(st.Channels)
			if st.Active {
				interval = h.active
			}
			h.publish(w, st.Fingerprint)
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

func (h *Hub) publish(w *watch, fp string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fp == w.last {
		return
	}
	w.last = fp
	for s := range w.subs {
		select { // keep only the latest fingerprint
		case <-s.C:
		default:
		}
		s.C <- fp
	}
}
