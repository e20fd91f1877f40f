package sandbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// fetchModules are the fetch example in every language that has it, and the C test
// handler http_call, which does the same with a few more knobs.
var fetchModules = map[string]string{
	"rust":           "modules/examples/rust/fetch.wasm",
	"tinygo":         "modules/examples/tinygo/fetch.wasm",
	"assemblyscript": "modules/examples/assemblyscript/fetch.wasm",
	"go":             "modules/examples/go/fetch.wasm",
	"c":              "modules/testdata/http_call.wasm",
}

func fetchModule(t testing.TB, lang string) string {
	t.Helper()
	p := filepath.Join(repoRoot(), fetchModules[lang])
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("module %s is missing: run `make examples` (%v)", p, err)
	}
	return p
}

const stepName = `step "fetch" of flow "demo" (flows.yaml:7)`

// httpServer serves the routes the capability tests use, on 127.0.0.1.
func httpServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello, world") })
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "not here", http.StatusNotFound) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(make([]byte, 2048)) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0ps3cret-value" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "welcome")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

// grant builds a step's capabilities from allow entries.
func grant(t testing.TB, allow ...string) *httpcap.Policy {
	t.Helper()
	p := &httpcap.Policy{}
	for _, a := range allow {
		pat, err := httpcap.ParsePattern(a)
		if err != nil {
			t.Fatal(err)
		}
		p.Allow = append(p.Allow, pat)
	}
	return p
}

func urlInput(url string) string { return fmt.Sprintf(`{"run":{"url":%q}}`, url) }

// The Must-show cases of capabilities, in every language on every engine: the allowed
// request succeeds (an HTTP error status is an output), and each refusal fails the task
// with its own message while the next task runs as before.
func TestFetchConformance(t *testing.T) {
	t.Parallel()
	srv, host := httpServer(t)
	other, otherHost := httpServer(t)
	_, port, _ := net.SplitHostPort(host)
	type fetchCase struct {
		name    string
		http    *httpcap.Policy
		url     string
		timeout time.Duration
		want    string // exact output; "" when the task must fail
		kind    sandbox.Kind
		parts   []string
	}
	withCap := func(p *httpcap.Policy, set func(*httpcap.Policy)) *httpcap.Policy { set(p); return p }
	cases := []fetchCase{
		{name: "allowed", http: grant(t, host), url: srv.URL + "/hello", want: `{"status":200,"bytes":12}`},
		{name: "error status is an output", http: grant(t, host), url: srv.URL + "/missing", want: `{"status":404,"bytes":9}`},
		{name: "redirect to an allowed host", http: grant(t, host, otherHost), url: srv.URL + "/redirect?to=" + other.URL + "/hello",
			want: `{"status":200,"bytes":12}`},
		{name: "no http key", url: srv.URL + "/hello", kind: sandbox.KindHandlerError,
			parts: []string{"http: " + stepName + " may not make HTTP requests: it has no `http` key in flows.yaml (grant hosts with http.allow)"}},
		{name: "unlisted host", http: grant(t, host), url: other.URL + "/hello", kind: sandbox.KindHandlerError,
			parts: []string{"http: host " + otherHost + " is not allowed: it matches no entry of http.allow of " + stepName + ": [" + host + "]"}},
		{name: "redirect to an unlisted host", http: grant(t, host), url: srv.URL + "/redirect?to=" + other.URL + "/hello", kind: sandbox.KindHandlerError,
			parts: []string{"http: redirect from " + host + " to " + otherHost + " refused: host " + otherHost + " is not allowed", "http.allow of " + stepName}},
		{name: "private address through a name", http: grant(t, "localhost:"+port), url: "http://localhost:" + port + "/hello", kind: sandbox.KindHandlerError,
			parts: []string{"http: localhost:" + port + " resolves to ", "a loopback address: refused, since no http.allow entry of " + stepName + " names that address"}},
		{name: "cloud metadata", http: grant(t, "*"), url: "http://169.254.169.254/latest/meta-data/", kind: sandbox.KindHandlerError,
			parts: []string{"http: 169.254.169.254:80 is a cloud metadata address: refused"}},
		{name: "response over the cap", http: withCap(grant(t, host), func(p *httpcap.Policy) { p.MaxResponseBytes = 1024 }), url: srv.URL + "/big",
			kind: sandbox.KindHandlerError, parts: []string{"http: the response body from " + host + " is over the 1 KiB of http.max_response_bytes of " + stepName}},
		{name: "more requests than allowed", http: withCap(grant(t, host), func(p *httpcap.Policy) { p.MaxRequests = 2 }),
			url: srv.URL + "/redirect?to=/redirect%3Fto%3D/hello", kind: sandbox.KindHandlerError,
			parts: []string{"http: request 3 refused: " + stepName + " allows 2 requests per task (http.max_requests; redirects count)"}},
		{name: "slow server past the deadline", http: grant(t, host), url: srv.URL + "/slow", timeout: 500 * time.Millisecond,
			kind: sandbox.KindTimeout, parts: []string{"task timed out after 500ms"}},
	}
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
		for _, lang := range []string{"rust", "tinygo", "assemblyscript", "go", "c"} {
			t.Run(lang, func(t *testing.T) {
				path := fetchModule(t, lang)
				for _, c := range cases {
					m := load(t, e, path, sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{Step: stepName, HTTP: c.http}})
					timeout := c.timeout
					if timeout == 0 {
						timeout = 30 * time.Second
					}
					start := time.Now()
					res, err := m.Run(context.Background(), task(urlInput(c.url), timeout))
					took := time.Since(start)
					if c.want != "" {
						if err != nil || string(res.Output) != c.want {
							t.Errorf("%s: %s, %v; want %s", c.name, res.Output, err, c.want)
						}
						continue
					}
					if err == nil {
						t.Errorf("%s: succeeded with %s", c.name, res.Output)
						continue
					}
					t.Run(c.name, func(t *testing.T) { wantKind(t, err, c.kind, c.parts...) })
					if c.kind == sandbox.KindTimeout {
						// The deadline stopped the request: the call returned at once, not when
						// the server gave up (it never does).
						if limit := timeout + 5*time.Second; took > limit {
							t.Errorf("%s: Run returned after %s", c.name, took)
						}
					}
				}
				// The same module and engine still serve an allowed request.
				m := load(t, e, path, sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{Step: stepName, HTTP: grant(t, host)}})
				if res, err := m.Run(context.Background(), task(urlInput(srv.URL+"/hello"), 30*time.Second)); err != nil || string(res.Output) != `{"status":200,"bytes":12}` {
					t.Errorf("after the refusals: %s, %v", res.Output, err)
				}
			})
		}
		if n := e.Abandoned(); n != 0 {
			t.Errorf("Abandoned() = %d: a request waiting on the network must end at the deadline", n)
		}
	})
}

// Named values: granted, not granted, listed but unset; the value reaches the server and
// nothing else.
func TestConfigGet(t *testing.T) {
	t.Parallel()
	srv, host := httpServer(t)
	env := sandbox.NewEnv([]string{"API_TOKEN", "MISSING"}, func(name string) (string, bool) {
		if name == "API_TOKEN" {
			return "t0ps3cret-value", true
		}
		return "", false
	})
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
		caps := sandbox.Capabilities{Step: stepName, HTTP: grant(t, host), Env: env}
		m := load(t, e, fetchModule(t, "c"), sandbox.ModuleConfig{Capabilities: caps})
		call := func(tokenEnv string) (sandbox.Result, error) {
			return m.Run(context.Background(), task(fmt.Sprintf(`{"run":{"url":%q,"token_env":%q}}`, srv.URL+"/whoami", tokenEnv), 30*time.Second))
		}
		res, err := call("API_TOKEN")
		if err != nil || string(res.Output) != `{"status":200,"bytes":7}` {
			t.Fatalf("with the token: %s, %v", res.Output, err)
		}
		_, err = call("DATABASE_URL")
		wantKind(t, err, sandbox.KindHandlerError, `config: `+stepName+` may not read "DATABASE_URL": add it to the step's `+"`env`"+` list in flows.yaml`)
		_, err = call("MISSING")
		wantKind(t, err, sandbox.KindHandlerError, `config: "MISSING" is in the `+"`env`"+` list of `+stepName+` but not set in the worker's environment`)
		_, err = call("not a name; t0ps3cret-value")
		wantKind(t, err, sandbox.KindHandlerError, "may not read this name")
		if strings.Contains(err.Error(), "t0ps3cret") {
			t.Errorf("message repeats what the guest asked for: %v", err)
		}

		// The ABI's edges: a partial copy returns the whole length.
		m = load(t, e, testModule(t, "capability_abi"), sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{
			Env: sandbox.NewEnv([]string{"TOKEN"}, func(string) (string, bool) { return "abcdef", true })}})
		if res, err := m.Run(context.Background(), task(`1`, 5*time.Second)); err != nil || string(res.Output) != `"abc"` {
			t.Errorf("partial config_get: %s, %v", res.Output, err)
		}
		if res, err := m.Run(context.Background(), task(`1234`, 5*time.Second)); err != nil || string(res.Output) != `0` {
			t.Errorf("last_error and http_response_read before any call: %s, %v", res.Output, err)
		}
		_, err = m.Run(context.Background(), task(`12`, 5*time.Second))
		wantKind(t, err, sandbox.KindProtocolError, "http_response_read: part 7 does not exist")
		_, err = m.Run(context.Background(), task(`123`, 5*time.Second))
		wantKind(t, err, sandbox.KindProtocolError, "http_request: 1000 bytes at address 65000 are outside the guest memory")
		runEcho(t, e)
	})
}

// An Env prints its names, never its values, whatever the verb or logger.
func TestEnvNeverShowsValues(t *testing.T) {
	t.Parallel()
	env := sandbox.NewEnv([]string{"A", "B", "A"}, func(name string) (string, bool) { return "v4lue-" + name, name == "A" })
	mc := sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{Env: env}}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "env", env, "mc", mc)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "env", env)
	for _, s := range []string{fmt.Sprint(env), fmt.Sprintf("%v %+v %#v %s %q", mc, mc, mc, env, env), logged.String()} {
		if strings.Contains(s, "v4lue") {
			t.Errorf("a value shows: %s", s)
		}
	}
	if got := env.String(); got != "env[A B (unset)]" {
		t.Errorf("String() = %q", got)
	}
	if got := env.Unset(); len(got) != 1 || got[0] != "B" {
		t.Errorf("Unset() = %v", got)
	}
}
