package jshandler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// BenchmarkFetch is one task of testdata/fetch.ts: a POST to a loopback server and its JSON
// answer, the request running in the background (http_start) while the engine waits for it
// (http_wait). sandbox's BenchmarkFetch is the same request from the other languages, over the
// blocking http_request.
func BenchmarkFetch(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	pattern, err := httpcap.ParsePattern(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	caps := sandbox.Capabilities{HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}}, Step: "bench"}
	for _, engine := range sandbox.Engines() {
		b.Run(engine, func(b *testing.B) {
			e, err := sandbox.New(engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(context.Background())
			m := load(b, e, "fetch.ts", sandbox.ModuleConfig{Capabilities: caps})
			t := sandbox.Task{Input: []byte(fmt.Sprintf(`{"url": %q, "method": "post", "body": "x"}`, srv.URL)), Context: taskContext(nil), Timeout: 10 * time.Second}
			for b.Loop() {
				if _, err := m.Run(context.Background(), t); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
