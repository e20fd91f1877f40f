package sandbox_test

import (
	"context"
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
)

// http_start and http_wait at the ABI's edges (testdata/wat/http_background.wat): a request
// left pending, waited for, refused while another runs, canceled, and one still running when
// the handler returns. The server sees every connection closed by the end of the task.
func TestHTTPStartAndWait(t *testing.T) {
	t.Parallel()
	var conns, arrived atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived.Add(1)
		<-r.Context().Done()
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			conns.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	forEachEngine(t, func(t *testing.T, engine string) {
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "http_background"), sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{Step: "bg", HTTP: grant(t, host)}})
		before := arrived.Load()
		res, err := m.Run(context.Background(), task(fmt.Sprintf("%q", srv.URL+"/hang"), 20*time.Second))
		if err != nil || string(res.Output) != "true" {
			t.Fatalf("%s, %v", res.Output, err)
		}
		if n := arrived.Load() - before; n != 2 {
			t.Errorf("%d requests reached the server, want 2 (the refused ones never go)", n)
		}
		for end := time.Now().Add(10 * time.Second); conns.Load() > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("after the task the server still has %d connections open", conns.Load())
			}
		}
	})
}
