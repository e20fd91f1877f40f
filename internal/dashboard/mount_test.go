package dashboard_test

import (
	"bufio"
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/dashtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// mounted serves a New dashboard on /ops/ of another server, beside a page of its own.
func mounted(t *testing.T, cfg dashboard.Config) (*dashboard.Dashboard, *httptest.Server) {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := dashboard.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	mux := http.NewServeMux()
	mux.Handle("/ops/", d.Handler())
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("the host's own page")) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return d, srv
}

// linkRE finds every address a page makes the browser ask for: links, forms, assets, and
// the event stream live.js opens (data-live).
var linkRE = regexp.MustCompile(`(?:href|src|action|data-live)="([^"]*)"`)

// Mounted on /ops/ of someone else's server, every link, form, asset and event stream of
// every page stays under /ops/, and each of them answers.
func TestMountedOnABasePathEveryAddressStaysUnderIt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, echoFlows, nil)
	workertest.StartWorker(t, db.Pool, file, worker.Config{})
	id := workertest.StartRun(t, db.Pool, "echo", `{"value": "`+strings.Repeat("x", 3000)+`"}`) // cut: a full-JSON link
	workertest.WaitRun(t, db.Pool, id, 60*time.Second)
	if _, err := db.Pool.Exec(context.Background(), `insert into pgflow.workers (worker_id, queue_name, function_name)
		values ('00000000-0000-4000-8000-0000000000aa', 'echo', 'edge')`); err != nil {
		t.Fatal(err)
	}
	d, srv := mounted(t, dashboard.Config{Pool: db.Pool, BasePath: "/ops", Actions: true, PollInterval: time.Hour})
	if d.BasePath() != "/ops" {
		t.Fatalf("BasePath %q", d.BasePath())
	}

	// The host's ServeMux, or the dashboard when it is handed /ops too, sends /ops to /ops/.
	if resp, _ := get(t, srv.URL+"/ops", nil); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ops/" {
		t.Errorf("/ops: %d to %q, want a redirect to /ops/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := get(t, srv.URL+"/ops/", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ops/runs" {
		t.Errorf("/ops/: %d to %q, want a redirect to /ops/runs", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, body := get(t, srv.URL+"/", nil); body != "the host's own page" {
		t.Errorf("the host's page: %q", body)
	}

	seen := map[string]bool{}
	for _, page := range []string{"/ops/runs", "/ops/runs/" + id, "/ops/flows", "/ops/workers", "/ops/runs?flow=echo&status=completed"} {
		resp, body := get(t, srv.URL+page, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d\n%s", page, resp.StatusCode, body)
		}
		links := linkRE.FindAllStringSubmatch(body, -1)
		if len(links) < 5 {
			t.Fatalf("%s: only %d addresses found", page, len(links))
		}
		for _, m := range links {
			u := html.UnescapeString(m[1])
			switch {
			case u == "" || strings.HasPrefix(u, "#") || strings.HasPrefix(u, "data:"):
				continue // a fragment of the same page, the empty icon
			case !strings.HasPrefix(u, "/ops/"):
				t.Errorf("%s links to %q, outside /ops/", page, u)
				continue
			}
			seen[strings.SplitN(u, "#", 2)[0]] = true
		}
	}
	for _, want := range []string{"/ops/static/app.css", "/ops/static/live.js", "/ops/actions/start", "/ops/actions/deprecate",
		"/ops/runs/" + id + "/json/input", "/ops/events/runs/" + id, "/ops/workers", "/ops/flows"} {
		found := false
		for u := range seen {
			found = found || strings.HasPrefix(u, want)
		}
		if !found {
			t.Errorf("no page links to %s", want)
		}
	}
	for u := range seen {
		if strings.HasPrefix(u, "/ops/actions/") {
			continue // forms: posted below
		}
		resp, body := get(t, srv.URL+u, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %.200s", u, resp.StatusCode, body)
		}
		if strings.HasPrefix(u, "/ops/events/") && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Errorf("%s: %q, want an event stream", u, resp.Header.Get("Content-Type"))
		}
	}

	// An action's redirect, and a notice's links and style, stay under /ops/ too.
	_, flows := get(t, srv.URL+"/ops/flows", nil)
	csrf := csrfRE.FindStringSubmatch(flows)
	if csrf == nil {
		t.Fatal("no csrf value on the flows page")
	}
	form := url.Values{"flow": {"echo"}, "input": {"{}"}, "csrf": {csrf[1]}}
	resp, err := noRedirect.PostForm(srv.URL+"/ops/actions/start", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ops/runs/") {
		t.Errorf("start: %d to %q, want a run page under /ops/", resp.StatusCode, loc)
	}
	resp, body := get(t, srv.URL+"/ops/runs/00000000-0000-4000-8000-000000000000", nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `href="/ops/runs"`) || !strings.Contains(body, `href="/ops/static/app.css`) {
		t.Errorf("a run that does not exist: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := get(t, srv.URL+"/opsother/runs", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a path beside /ops/: %d", resp.StatusCode)
	}
}

// Closing a mounted dashboard ends its open event streams, though the host's server goes on,
// and it answers 503 from then on.
func TestClosingAMountedDashboardEndsItsStreams(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	d, srv := mounted(t, dashboard.Config{Pool: db.Pool, BasePath: "ops/", PollInterval: time.Hour})
	resp, err := http.Get(srv.URL + "/ops/events/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		close(ended)
	}()
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	for _, ch := range []chan struct{}{closed, ended} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not end the open stream within 10 s")
		}
	}
	if resp, _ := get(t, srv.URL+"/ops/runs", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Close: %d, want 503", resp.StatusCode)
	}
}

// With a token, the session cookie belongs to the base path and the redirect that drops the
// token from the address stays under it; without one, only loopback Host headers are
// answered, as on an address of its own.
func TestAMountedDashboardKeepsItsGuard(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	_, srv := mounted(t, dashboard.Config{Pool: db.Pool, BasePath: "/ops", Token: dashtest.Token})
	if resp, _ := get(t, srv.URL+"/ops/runs", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d", resp.StatusCode)
	}
	resp, _ := get(t, srv.URL+"/ops/runs?flow=echo&token="+dashtest.Token, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/ops/runs?flow=echo" {
		t.Errorf("with ?token=: %d to %q, want /ops/runs?flow=echo", resp.StatusCode, loc)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	if cookie == nil || cookie.Path != "/ops/" {
		t.Fatalf("session cookie %+v, want path /ops/", cookie)
	}
	if resp, _ := get(t, srv.URL+"/ops/runs", http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}}); resp.StatusCode != http.StatusOK {
		t.Errorf("with the cookie: %d", resp.StatusCode)
	}

	_, open := mounted(t, dashboard.Config{Pool: db.Pool, BasePath: "/ops"})
	req, _ := http.NewRequest(http.MethodGet, open.URL+"/ops/runs", nil)
	req.Host = "dashboard.example.com"
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("no token, another Host: %d, want 403", resp.StatusCode)
	}
	if _, err := dashboard.New(context.Background(), dashboard.Config{Pool: db.Pool, BasePath: "/ops?x=1"}); err == nil {
		t.Error("a base path with a query was accepted")
	}
}
