package jshandler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// hangServer is a loopback server whose /hang never answers (until its client closes the
// connection). /hanging answers how many /hang requests it still holds, once that is 0 or 5
// seconds have passed: the server notices a closed connection a moment after the client.
type hangServer struct {
	*httptest.Server
	conns, hangs, arrived atomic.Int64
}

func newHangServer(t *testing.T) *hangServer {
	t.Helper()
	s := &hangServer{}
	mux := http.NewServeMux()
	// The body is read first: until then the server does not watch the connection, and would
	// not see it closed.
	hang := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.arrived.Add(1)
		s.hangs.Add(1)
		defer s.hangs.Add(-1)
		<-r.Context().Done()
	}
	mux.HandleFunc("/hang", hang)
	mux.HandleFunc("/v1/chat/completions", hang)
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hi")) })
	mux.HandleFunc("/hanging", func(w http.ResponseWriter, r *http.Request) {
		for end := time.Now().Add(5 * time.Second); s.hangs.Load() > 0 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Fprint(w, s.hangs.Load())
	})
	s.Server = httptest.NewUnstartedServer(mux)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.conns.Add(-1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// allClosed waits for the server to see every connection of a task closed.
func (s *hangServer) allClosed(t *testing.T) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); s.conns.Load() > 0 || s.hangs.Load() > 0; {
		if time.Now().After(end) {
			t.Fatalf("after the task the server still has %d connections open, %d requests hanging", s.conns.Load(), s.hangs.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *hangServer) caps(t *testing.T) sandbox.Capabilities {
	pattern, err := httpcap.ParsePattern(strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.Capabilities{HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}}, Step: "abort"}
}

// An AbortSignal stops a request whose server never answers, within the step's deadline: the
// fetch rejects with the signal's reason and the server sees the connection closed while the
// task still runs. A request that answers is unchanged; queued fetches wait their turn; a
// request left running when the task ends is stopped too.
func TestAbortSignalStopsAHangingFetch(t *testing.T) {
	srv := newHangServer(t)
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "abort.ts", sandbox.ModuleConfig{Capabilities: srv.caps(t)})
		runCase := func(t *testing.T, name string, fixedClock bool) map[string]any {
			t.Helper()
			in, _ := json.Marshal(map[string]string{"case": name, "base": srv.URL})
			res, err := m.Run(context.Background(), sandbox.Task{Input: in, Context: taskContext(nil), Timeout: 20 * time.Second, FixedClock: fixedClock})
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]any
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatalf("%s: %v", res.Output, err)
			}
			srv.allClosed(t)
			return out
		}
		t.Run("timeout", func(t *testing.T) {
			out := runCase(t, "timeout", false)
			if out["error"] != "TimeoutError" || out["hanging"] != 0.0 {
				t.Errorf("AbortSignal.timeout(200): %v (want TimeoutError, no request left at the server)", out)
			}
			if ms, _ := out["ms"].(float64); ms < 200 {
				t.Errorf("aborted after %.1f ms, before the signal's 200", ms)
			}
		})
		t.Run("controller", func(t *testing.T) {
			out := runCase(t, "controller", false)
			if out["error"] != "AbortError" || out["hanging"] != 0.0 {
				t.Errorf("setTimeout(() => c.abort(), 100): %v (want AbortError, no request left at the server)", out)
			}
			if ms, _ := out["ms"].(float64); ms < 100 {
				t.Errorf("aborted after %.1f ms, before the timer's 100", ms)
			}
		})
		t.Run("completes", func(t *testing.T) {
			out := runCase(t, "completes", false)
			if out["status"] != 200.0 || out["text"] != "hi" {
				t.Errorf("a request that answers: %v", out)
			}
		})
		t.Run("queued", func(t *testing.T) {
			before := srv.arrived.Load()
			out := runCase(t, "queued", false)
			want := map[string]any{"a": "TimeoutError", "b": "hi", "first": "TimeoutError", "second": "AbortError", "hanging": 0.0}
			for k, v := range want {
				if out[k] != v {
					t.Errorf("%s: %v, want %v (all: %v)", k, out[k], v, out)
				}
			}
			if n := srv.arrived.Load() - before; n != 2 {
				t.Errorf("%d requests reached /hang, want 2: the one aborted in the queue never goes", n)
			}
		})
		t.Run("leftRunning", func(t *testing.T) {
			before := srv.arrived.Load()
			out := runCase(t, "leftRunning", false) // allClosed: the host stopped it
			if out["returned"] != true || srv.arrived.Load()-before != 1 {
				t.Errorf("%v, %d requests", out, srv.arrived.Load()-before)
			}
		})
		// With deterministic: true the clock moves only as the task waits: its wait for the
		// request counts, so the timeout fires.
		t.Run("fixedClock", func(t *testing.T) {
			out := runCase(t, "timeout", true)
			if out["error"] != "TimeoutError" {
				t.Errorf("AbortSignal.timeout(200) on the fixed clock: %v", out)
			}
		})
	})
}

// The openai SDK's timeout option ends a request to a server that never answers with its
// APIConnectionTimeoutError (its own timer aborts its fetch), and the connection is closed.
func TestSDKOpenAITimeout(t *testing.T) {
	srv := newHangServer(t)
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := loadSDK(t, e, "openai_timeout.ts", sandbox.ModuleConfig{Capabilities: srv.caps(t)})
		before := srv.arrived.Load()
		out := runSDK(t, m, map[string]any{"baseURL": srv.URL + "/v1"})
		if out["error"] != "APIConnectionTimeoutError" {
			t.Errorf("openai with timeout 300 against a server that never answers: %v", out)
		}
		if srv.arrived.Load()-before != 1 {
			t.Errorf("%d requests reached the server, want 1", srv.arrived.Load()-before)
		}
		srv.allClosed(t)
	})
}
