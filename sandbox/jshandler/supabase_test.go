package jshandler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// supabaseNames are the variables a step is granted for ctx.supabase.
var supabaseNames = []string{"SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY"}

// fakePostgREST answers PostgREST's select and insert of table websites for requests with the
// service role key, and records what it was asked.
func fakePostgREST(t *testing.T, key string) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		if r.Header.Get("apikey") != key || r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"message":"wrong key"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/rest/v1/websites" && r.URL.Query().Get("status") == "eq.new":
			_, _ = io.WriteString(w, `[{"id":1,"url":"https://a.example"}]`)
		case r.Method == "POST" && r.URL.Path == "/rest/v1/websites":
			var row map[string]any
			if err := json.Unmarshal(body, &row); err != nil {
				w.WriteHeader(400)
				_, _ = io.WriteString(w, `{"message":"bad body"}`)
				return
			}
			row["id"] = 2
			w.WriteHeader(201)
			_ = json.NewEncoder(w).Encode(row)
		default:
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"message":"not found"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func supabaseCaps(t *testing.T, allow string, names ...string) sandbox.Capabilities {
	t.Helper()
	c := sandbox.Capabilities{Env: sandbox.NewEnv(names, os.LookupEnv), Step: "db"}
	if allow != "" {
		p, err := httpcap.ParsePattern(allow)
		if err != nil {
			t.Fatal(err)
		}
		c.HTTP = &httpcap.Policy{Allow: []httpcap.Pattern{p}}
	}
	return c
}

// A step granted SUPABASE_URL, SUPABASE_SERVICE_ROLE_KEY and the URL's host gets ctx.supabase
// as pgflow's worker gives it: supabase-js with the service role key, one client per task,
// its requests through fetch and the step's http grant.
func TestCtxSupabaseSelectsAndInsertsWithTheGrantedKey(t *testing.T) {
	srv, seen := fakePostgREST(t, "service-key")
	t.Setenv("SUPABASE_URL", srv.URL)
	t.Setenv("SUPABASE_SERVICE_ROLE_KEY", "service-key")
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		before := len(seen())
		caps := supabaseCaps(t, strings.TrimPrefix(srv.URL, "http://"), "SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY")
		m := load(t, e, "ctxsupabase.ts", sandbox.ModuleConfig{Capabilities: caps})
		res, err := run(t, m, `{}`, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"rows":[{"id":1,"url":"https://a.example"}],"inserted":{"id":2,"url":"https://b.example"},"same":true}`)
		want := []string{"GET /rest/v1/websites?select=id%2Curl&status=eq.new", "POST /rest/v1/websites?select=*"}
		if got := seen()[before:]; strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// A step without the grant gets an error naming what to grant when it touches ctx.supabase;
// one granted the names but not the URL's host gets fetch's refusal through supabase-js.
func TestCtxSupabaseWithoutTheGrantSaysWhatToGrant(t *testing.T) {
	srv, seen := fakePostgREST(t, "service-key")
	t.Setenv("SUPABASE_URL", srv.URL)
	t.Setenv("SUPABASE_SERVICE_ROLE_KEY", "service-key")
	host := strings.TrimPrefix(srv.URL, "http://")
	grant := "ctx.supabase is not available to this step: grant the step env: [SUPABASE_URL, SUPABASE_SERVICE_ROLE_KEY] and http.allow of the URL's host in flows.yaml"
	cases := []struct {
		name string
		caps sandbox.Capabilities
		want string
	}{
		{"no grant", sandbox.Capabilities{}, grant},
		{"the URL only", supabaseCaps(t, host, "SUPABASE_URL"), grant},
		{"the key only", supabaseCaps(t, host, "SUPABASE_SERVICE_ROLE_KEY"), grant},
		{"no http", supabaseCaps(t, "", "SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY"),
			"ctx.supabase is not available: the step is granted SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY but no http section: grant http.allow of the URL's host"},
		{"another host", supabaseCaps(t, "example.com", "SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY"), "http.allow"},
	}
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				m := load(t, e, "ctxsupabase.ts", sandbox.ModuleConfig{Capabilities: c.caps})
				res, err := run(t, m, `{}`, 30*time.Second)
				var msg string
				if err != nil {
					msg = err.Error()
				} else {
					var out struct{ Error string }
					_ = json.Unmarshal(res.Output, &out)
					msg = out.Error
				}
				if !strings.Contains(msg, c.want) {
					t.Errorf("got %q (output %s), want it to contain %q", msg, res.Output, c.want)
				}
			})
		}
		if n := len(seen()); n != 0 {
			t.Errorf("the fake was reached %d times by steps not granted it", n)
		}
	})
}

// supabase-js is in the snapshots of granted steps only: a step without the grant has the
// same snapshot as a step with no capabilities at all.
func TestCtxSupabaseCostsOnlyTheGrantedSteps(t *testing.T) {
	t.Setenv("SUPABASE_URL", "http://127.0.0.1:1")
	t.Setenv("SUPABASE_SERVICE_ROLE_KEY", "k")
	e, err := sandbox.New(sandbox.Engines()[0], sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	dir := t.TempDir()
	snapshot := func(caps sandbox.Capabilities) []byte {
		t.Helper()
		before, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*.wasm"))
		m, err := jshandler.Load(context.Background(), e, filepath.Join("testdata", "greet.ts"), sandbox.ModuleConfig{Capabilities: caps}, jshandler.Options{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Close(context.Background())
		after, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*.wasm"))
		if len(after) != len(before)+1 {
			return nil
		}
		for _, f := range after {
			if !strings.Contains(strings.Join(before, "\n"), f) {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				return data
			}
		}
		return nil
	}
	marker := []byte("@supabase/supabase-js")
	plain := snapshot(sandbox.Capabilities{})
	if plain == nil || bytes.Contains(plain, marker) {
		t.Fatalf("a step without capabilities: snapshot of %d bytes, carrying supabase-js: %v", len(plain), bytes.Contains(plain, marker))
	}
	if again := snapshot(supabaseCaps(t, "example.com", "SUPABASE_URL", "OTHER")); again != nil {
		t.Errorf("a step granted only SUPABASE_URL got a snapshot of its own (%d bytes)", len(again))
	}
	granted := snapshot(supabaseCaps(t, "127.0.0.1:1", "SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY"))
	if granted == nil || !bytes.Contains(granted, marker) {
		t.Fatalf("a granted step: snapshot of %d bytes, carrying supabase-js: %v", len(granted), granted != nil && bytes.Contains(granted, marker))
	}
	t.Logf("greet's snapshot: %d bytes without the grant, %d with", len(plain), len(granted))
}

// BenchmarkCtxSupabaseGrant is one greet task of a step without the Supabase grant and of one
// with it (supabase-js in its snapshot, ctx.supabase not read): what the grant costs a task.
func BenchmarkCtxSupabaseGrant(b *testing.B) {
	b.Setenv("SUPABASE_URL", "http://127.0.0.1:1")
	b.Setenv("SUPABASE_SERVICE_ROLE_KEY", "k")
	p, err := httpcap.ParsePattern("127.0.0.1:1")
	if err != nil {
		b.Fatal(err)
	}
	granted := sandbox.Capabilities{Env: sandbox.NewEnv(supabaseNames, os.LookupEnv), HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{p}}, Step: "greet"}
	for _, engine := range sandbox.Engines() {
		e, err := sandbox.New(engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name string
			caps sandbox.Capabilities
		}{{"without", sandbox.Capabilities{}}, {"granted", granted}} {
			b.Run(engine+"/"+c.name, func(b *testing.B) {
				m, err := jshandler.Load(context.Background(), e, example(b, "typescript/greet.ts"), sandbox.ModuleConfig{Capabilities: c.caps}, jshandler.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(context.Background())
				t := sandbox.Task{Input: []byte(`{"run":{"name":"Ada"}}`), Context: greetCtx, Timeout: 10 * time.Second}
				if res, err := m.Run(context.Background(), t); err != nil || string(res.Output) != `{"greeting":"Hello, Ada!"}` {
					b.Fatalf("%s, %v", res.Output, err)
				}
				runtime.GC()
				cpu0 := cpuTime()
				for b.Loop() {
					if _, err := m.Run(context.Background(), t); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
		_ = e.Close(context.Background())
	}
}
