package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/live"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
)

// streamPing keeps idle event streams (and proxies in between) from timing out.
const streamPing = 20 * time.Second

func (s *Dashboard) runsEvents(w http.ResponseWriter, r *http.Request) {
	f, _ := runFilter(r.URL.Query())
	key := "runs?" + f.Flow + "&" + f.Status
	if f.Before != nil {
		key += "&before=" + f.Before.String()
	}
	if f.After != nil {
		key += "&after=" + f.After.String()
	}
	s.stream(w, r, key, s.runsProbe(f))
}

func (s *Dashboard) runEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// Any other error (the database away) is for the stream to report, as it would have had
	// the stream been open already.
	if _, _, err := s.store.RunState(r.Context(), id); errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, err)
		return
	}
	s.stream(w, r, "run/"+id, s.runProbe(id))
}

func (s *Dashboard) flowsEvents(w http.ResponseWriter, r *http.Request) {
	s.stream(w, r, "flows", s.flowsProbe())
}

func (s *Dashboard) workersEvents(w http.ResponseWriter, r *http.Request) {
	older := r.URL.Query().Get("older")
	s.stream(w, r, "workers?"+older, s.workersProbe(older))
}

// stream is a Server-Sent Events stream that sends "change" whenever the page's
// fingerprint differs from the one the page was rendered with (?v=), then from the last
// one sent. The page's script then fetches the page's live part again. When the page's
// state cannot be read it sends "unreachable" with the reason (the page shows it and stops
// its clocks), and "reachable" once it can be read again.
func (s *Dashboard) stream(w http.ResponseWriter, r *http.Request, key string, probe live.Probe) {
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		http.Error(w, "too many open live pages; this one falls back to polling", http.StatusServiceUnavailable)
		return
	}
	if !s.enter() {
		http.Error(w, "the dashboard was closed", http.StatusServiceUnavailable)
		return
	}
	defer s.open.Done()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// A short retry: after a dashboard restart, pages reconnect within a few seconds.
	if _, err := fmt.Fprint(w, "retry: 3000\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	watcher := s.hub.Watch(key, probe)
	defer watcher.Close()
	seen := r.URL.Query().Get("v")
	down := false
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done(): // mounted in another server: its requests outlive Close
			return
		case u := <-watcher.C:
			if u.Err != nil {
				down = true
				_, msg := dbProblem(u.Err)
				_, err = fmt.Fprintf(w, "event: unreachable\ndata: %s\n\n", strings.Join(strings.Fields(msg), " "))
				break
			}
			if down {
				down = false
				if _, err = fmt.Fprint(w, "event: reachable\ndata: \n\n"); err != nil {
					return
				}
			}
			if u.Fingerprint == seen {
				if err = rc.Flush(); err != nil {
					return
				}
				continue
			}
			seen = u.Fingerprint
			_, err = fmt.Fprintf(w, "event: change\ndata: %s\n\n", u.Fingerprint)
		case <-ping.C:
			_, err = fmt.Fprint(w, ": ping\n\n")
		}
		if err != nil || rc.Flush() != nil {
			return
		}
	}
}
