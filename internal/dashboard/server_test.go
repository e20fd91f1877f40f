package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/dashtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

const echoFlows = `
flows:
  - slug: echo
    steps:
      - {slug: echo, module: {{root}}/modules/testdata/echo.wasm}
`

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       30 * time.Second,
}

func get(t *testing.T, rawURL string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := readSome(resp.Body) // an event stream never ends: read what is there
	return resp, body
}

// readSome reads a body to its end, or for half a second when it does not end.
func readSome(r io.ReadCloser) string {
	var b bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&b, io.LimitReader(r, 1<<20)); close(done) }()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
		r.Close() // ends the copy
		<-done
	}
	return b.String()
}

func TestAnAddressOtherThanLoopbackNeedsAToken(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		_, err := dashboard.Listen(context.Background(), addr, dashboard.Config{Pool: db.Pool})
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") || !strings.Contains(err.Error(), "--ui-token") {
			t.Errorf("Listen(%s) without a token: %v, want a refusal naming --ui-token", addr, err)
		}
	}
	_, err := dashboard.Listen(context.Background(), "0.0.0.0:0", dashboard.Config{Pool: db.Pool, Token: "short"})
	if err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a 5-character token: %v", err)
	}
	dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool}) // loopback: fine without one
}

// With a token, nothing (no page, no value, no event stream) is served without it.
func TestTheTokenIsCheckedOnEveryRequestAndStream(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	id := workertest.StartRun(t, db.Pool, "echo", `{"secret": "sesame-1234"}`)
	srv := dashtest.Listen(t, "0.0.0.0:0", dashboard.Config{Pool: db.Pool, Token: dashtest.Token})
	_, port, _ := net.SplitHostPort(srv.Addr())
	host := dashtest.NonLoopbackIP()
	if host == "" {
		host = "127.0.0.1" // no other interface: the token is still required on loopback
	}
	base := "http://" + net.JoinHostPort(host, port)
	paths := []string{"/runs", "/runs/" + id, "/runs/" + id + "/json/input", "/flows", "/workers",
		"/search?q=0000ffff0000", // finds no run: a page, not a redirect
		"/events/runs", "/events/runs/" + id, "/events/flows", "/events/workers"}
	for _, p := range paths {
		for name, h := range map[string]http.Header{
			"no token":     nil,
			"wrong bearer": {"Authorization": {"Bearer not-the-token-at-all-no"}},
			"wrong cookie": {"Cookie": {"pgflow_wasm_ui=" + strings.Repeat("0", 64)}},
		} {
			resp, body := get(t, base+p, h)
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "sesame") || strings.Contains(body, id) {
				t.Errorf("%s %s: status %d, body %.120q; want 401 and nothing of the run", name, p, resp.StatusCode, body)
			}
		}
		resp, body := get(t, base+p+"?token=wrong-token-wrong-token", nil)
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "sesame") {
			t.Errorf("wrong ?token= on %s: %d", p, resp.StatusCode)
		}
		resp, _ = get(t, base+p, http.Header{"Authorization": {"Bearer " + dashtest.Token}})
		if resp.StatusCode != http.StatusOK {
			t.Errorf("bearer token on %s: %d, want 200", p, resp.StatusCode)
		}
	}
	// ?token= once: a cookie (not the token), and a redirect that drops it from the address.
	resp, _ := get(t, base+"/runs/"+id+"?token="+url.QueryEscape(dashtest.Token), nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || strings.Contains(loc, "token") || !strings.HasPrefix(loc, "/runs/"+id) {
		t.Fatalf("?token=: status %d, Location %q", resp.StatusCode, loc)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "pgflow_wasm_ui" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.Value == dashtest.Token || strings.Contains(cookie.Value, dashtest.Token) {
		t.Fatalf("session cookie: %+v", cookie)
	}
	resp, body := get(t, base+loc, http.Header{"Cookie": {cookie.String()}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "sesame-1234") {
		t.Fatalf("with the cookie: %d %.200s", resp.StatusCode, body)
	}
}

// Without a token (loopback only) the Host must be a loopback name: a page elsewhere that
// points its own domain at 127.0.0.1 gets nothing.
func TestLoopbackWithoutATokenRefusesOtherHostNames(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	_, port, _ := net.SplitHostPort(srv.Addr())
	for host, want := range map[string]int{
		"evil.example:" + port: http.StatusForbidden,
		"localhost:" + port:    http.StatusOK,
		"127.0.0.1:" + port:    http.StatusOK,
		"[::1]:" + port:        http.StatusOK,
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL()+"runs", nil)
		req.Host = host
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// syncBuffer is a log the dashboard writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestActionsAreOffByDefaultCheckedAndLogged(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	if _, err := db.Pool.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name)
		values ('00000000-0000-4000-8000-0000000000aa', 'echo', 'edge')`); err != nil {
		t.Fatal(err)
	}
	runCount := func() int {
		var n int
		_ = db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs`).Scan(&n)
		return n
	}
	post := func(srv *dashboard.Server, path string, form url.Values, origin string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL()+strings.TrimPrefix(path, "/"), strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	csrfOf := func(srv *dashboard.Server, page string) string {
		_, body := get(t, srv.URL()+page, nil)
		m := csrfRE.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no csrf value in %s", page)
		}
		return m[1]
	}

	readOnly := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	if _, body := get(t, readOnly.URL()+"flows", nil); strings.Contains(body, "/actions/start") {
		t.Error("a read-only dashboard shows the start form")
	}
	resp, body := post(readOnly, "/actions/start", url.Values{"flow": {"echo"}, "input": {"{}"}}, "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--ui-actions") || runCount() != 0 {
		t.Fatalf("start on a read-only dashboard: %d %q, %d runs", resp.StatusCode, body, runCount())
	}

	var log syncBuffer
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Actions: true,
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	csrf := csrfOf(srv, "flows")
	for name, tc := range map[string]struct {
		form   url.Values
		origin string
	}{
		"no csrf":      {url.Values{"flow": {"echo"}, "input": {"{}"}}, ""},
		"wrong csrf":   {url.Values{"flow": {"echo"}, "input": {"{}"}, "csrf": {strings.Repeat("a", 64)}}, ""},
		"other origin": {url.Values{"flow": {"echo"}, "input": {"{}"}, "csrf": {csrf}}, "http://evil.example"},
	} {
		if resp, _ := post(srv, "/actions/start", tc.form, tc.origin); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	resp, body = post(srv, "/actions/start", url.Values{"flow": {"echo"}, "input": {`{"a": `}, "csrf": {csrf}}, "")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "not valid JSON") || !strings.Contains(body, "{&#34;a&#34;:</textarea>") {
		t.Errorf("invalid JSON: %d, want 400 with the reason and the input kept; body %s", resp.StatusCode, body)
	}
	resp, body = post(srv, "/actions/start", url.Values{"flow": {"no_such_flow"}, "input": {`{}`}, "csrf": {csrf}}, "")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "no_such_flow") {
		t.Errorf("unknown flow: %d %.300s", resp.StatusCode, body)
	}
	if n := runCount(); n != 0 {
		t.Fatalf("refused starts created %d runs", n)
	}
	resp, _ = post(srv, "/actions/start", url.Values{"flow": {"echo"}, "input": {`{"value": 42}`}, "csrf": {csrf}}, srv.URL()[:len(srv.URL())-1])
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/runs/") || runCount() != 1 {
		t.Fatalf("start: %d, Location %q, %d runs", resp.StatusCode, loc, runCount())
	}
	id := strings.TrimPrefix(loc, "/runs/")
	if !strings.Contains(log.String(), "started a run") || !strings.Contains(log.String(), id) {
		t.Errorf("the start is not logged with its run id:\n%s", log.String())
	}

	worker := "00000000-0000-4000-8000-0000000000aa"
	resp, _ = post(srv, "/actions/deprecate", url.Values{"worker_id": {worker}, "csrf": {csrfOf(srv, "workers")}}, "")
	var deprecated bool
	_ = db.Pool.QueryRow(ctx, `select deprecated_at is not null from pgflow.workers where worker_id = $1::uuid`, worker).Scan(&deprecated)
	if resp.StatusCode != http.StatusSeeOther || !deprecated || !strings.Contains(log.String(), "deprecated a worker") {
		t.Fatalf("deprecate: %d, deprecated %v, log:\n%s", resp.StatusCode, deprecated, log.String())
	}
	resp, body = post(srv, "/actions/deprecate", url.Values{"worker_id": {"<b>nope</b>"}, "csrf": {csrf}}, "")
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(body, "<b>") {
		t.Errorf("deprecating a bad id: %d %q", resp.StatusCode, body)
	}

	// Cancel, rerun, drain and undrain: refused read-only, without the form's csrf value or
	// from another site; a bad or unknown id is refused with the reason, and changes nothing.
	for _, a := range []struct{ path, field, id string }{
		{"/actions/cancel", "run_id", id}, {"/actions/rerun", "run_id", id},
		{"/actions/drain", "process_id", worker}, {"/actions/undrain", "process_id", worker},
	} {
		if resp, body := post(readOnly, a.path, url.Values{a.field: {a.id}}, ""); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--ui-actions") {
			t.Errorf("%s on a read-only dashboard: %d", a.path, resp.StatusCode)
		}
		if resp, _ := post(srv, a.path, url.Values{a.field: {a.id}}, ""); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s without csrf: %d, want 403", a.path, resp.StatusCode)
		}
		if resp, _ := post(srv, a.path, url.Values{a.field: {a.id}, "csrf": {csrf}}, "http://evil.example"); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s from another site: %d, want 403", a.path, resp.StatusCode)
		}
		if resp, body := post(srv, a.path, url.Values{a.field: {"<b>nope</b>"}, "csrf": {csrf}}, ""); resp.StatusCode != http.StatusBadRequest || strings.Contains(body, "<b>") {
			t.Errorf("%s of a bad id: %d %q", a.path, resp.StatusCode, body)
		}
	}
	// The worker row above belongs to no pgflow-wasm process: nothing to drain.
	if resp, body := post(srv, "/actions/drain", url.Values{"process_id": {worker}, "csrf": {csrf}}, ""); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(body, "neither a worker process nor a worker row of one") {
		t.Errorf("draining a row of no process: %d %.300s", resp.StatusCode, body)
	}
	if runCount() != 1 {
		t.Errorf("refused reruns started runs: %d runs, want 1", runCount())
	}
}

// What a browser sends decides: a form posted from another site is refused (403) and the
// refusal logged with its reason; the dashboard's own form passes whatever Origin the
// browser chose to send with it ("null" under a no-referrer policy).
func TestACrossSitePostIsRefusedAndLogged(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	var log syncBuffer
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Actions: true, Log: slog.New(slog.NewTextHandler(&log, nil))})
	_, flowsPage := get(t, srv.URL()+"flows", nil)
	m := csrfRE.FindStringSubmatch(flowsPage)
	if m == nil {
		t.Fatal("no csrf value on the flows page")
	}
	csrf := m[1]
	runCount := func() int {
		var n int
		_ = db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs`).Scan(&n)
		return n
	}
	self := strings.TrimSuffix(srv.URL(), "/")
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"cross-site", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site", map[string]string{"Origin": "http://other.localhost:1", "Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"an old browser on another site", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"an old browser on a page without referrers", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"Chromium on the dashboard's page under no-referrer", map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
		{"a browser on the dashboard's page", map[string]string{"Origin": self, "Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
		{"an old browser on the dashboard's page", map[string]string{"Origin": self}, http.StatusSeeOther},
		{"a script (no Origin)", nil, http.StatusSeeOther},
	} {
		before := runCount()
		form := url.Values{"flow": {"echo"}, "input": {`{}`}, "csrf": {csrf}}
		req, _ := http.NewRequest(http.MethodPost, srv.URL()+"actions/start", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		started := runCount() - before
		if resp.StatusCode != tc.want || (tc.want == http.StatusForbidden) != (started == 0) {
			t.Errorf("%s: %d, %d runs started; want %d", tc.name, resp.StatusCode, started, tc.want)
		}
		if tc.want == http.StatusForbidden && (!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(string(body), "did not come from the dashboard") || !strings.Contains(string(body), `href="/flows"`)) {
			t.Errorf("%s: the refusal is not a page that explains it: %s", tc.name, body)
		}
	}
	logged := log.String()
	var refusals []string
	for _, line := range strings.Split(logged, "\n") {
		if strings.Contains(line, "dashboard action refused") {
			refusals = append(refusals, line)
		}
	}
	if len(refusals) != 4 {
		t.Fatalf("%d refusals logged, want 4:\n%s", len(refusals), logged)
	}
	first := refusals[0]
	for _, want := range []string{"level=WARN", "path=/actions/start", "remote=127.0.0.1:", `Sec-Fetch-Site \"cross-site\"`, `Origin \"http://evil.example\"`} {
		if !strings.Contains(first, want) {
			t.Errorf("the cross-site refusal's log line lacks %s:\n%s", want, first)
		}
	}
	if strings.Contains(logged, csrf) {
		t.Error("the log holds the csrf value")
	}
}

// A handler's output is text on the page, whatever it contains; the JSON link serves it as
// JSON that no browser renders as a page.
func TestOutputsAreEscapedAndServedAsJSON(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, echoFlows, nil)
	workertest.StartWorker(t, db.Pool, file, worker.Config{})
	payload := `<script>document.title='owned'</script><img src=x onerror=alert(1)>`
	id := workertest.StartRun(t, db.Pool, "echo", `{"value": "`+payload+`"}`)
	workertest.WaitRun(t, db.Pool, id, 60*time.Second)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	resp, body := get(t, srv.URL()+"runs/"+id, nil)
	if resp.StatusCode != 200 || strings.Contains(body, "<script>document") || strings.Contains(body, "<img src=x") {
		t.Fatalf("the output reached the page as HTML:\n%s", body)
	}
	if !strings.Contains(body, "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;") {
		t.Errorf("the output is not on the page as escaped text")
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy: %q", csp)
	}
	resp, body = get(t, srv.URL()+"runs/"+id+"/json/output", nil)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("JSON served as %q (nosniff %q)", ct, resp.Header.Get("X-Content-Type-Options"))
	}
	if !strings.Contains(body, "<script>") {
		t.Errorf("the full output is the stored JSON, unchanged: %s", body)
	}
}

// An open event stream says "change" when the run moves, without being asked again.
func TestTheRunStreamTellsWhenTheRunChanges(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, echoFlows, nil)
	workertest.Compile(t, db.Pool, file)
	id := workertest.StartRun(t, db.Pool, "echo", `{"value": 1}`)
	// A long poll interval: the change must come from the run's NOTIFY.
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, PollInterval: time.Hour})
	_, page := get(t, srv.URL()+"runs/"+id, nil)
	m := regexp.MustCompile(`data-version="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the page has no data-version")
	}
	resp, err := http.Get(srv.URL() + "events/runs/" + id + "?v=" + m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream content type %q", ct)
	}
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "event: ") {
				events <- strings.TrimPrefix(sc.Text(), "event: ")
			}
		}
		close(events)
	}()
	select {
	case ev := <-events:
		t.Fatalf("an event (%q) before anything changed", ev)
	case <-time.After(500 * time.Millisecond):
	}
	workertest.StartWorker(t, db.Pool, file, worker.Config{})
	select {
	case ev := <-events:
		if ev != "change" {
			t.Fatalf("event %q, want change", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no change event within 30 s of the run completing")
	}
}

// A map step's elements are listed a page at a time, with links between the pages.
func TestAMapStepsElementsArePaged(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, `
flows:
  - slug: many
    steps:
      - {slug: each, type: map, module: {{root}}/modules/testdata/echo_map.wasm}
`, nil)
	workertest.StartWorker(t, db.Pool, file, worker.Config{})
	elements := make([]string, 25)
	for i := range elements {
		elements[i] = fmt.Sprintf(`"element-%02d"`, i)
	}
	id := workertest.StartRun(t, db.Pool, "many", "["+strings.Join(elements, ",")+"]")
	workertest.WaitRun(t, db.Pool, id, 60*time.Second)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, TasksPerPage: 10})
	taskRows := regexp.MustCompile(`id="task-each-(\d+)"`)
	next := regexp.MustCompile(`href="([^"]+)">next ›`)
	page := "/runs/" + id
	var seen []string
	for i := 0; i < 3; i++ {
		_, body := get(t, srv.URL()+strings.TrimPrefix(page, "/"), nil)
		rows := taskRows.FindAllStringSubmatch(body, -1)
		for _, r := range rows {
			seen = append(seen, r[1])
		}
		if !strings.Contains(body, "25 of 25 elements done") {
			t.Errorf("page %d does not show the map's progress", i)
		}
		m := next.FindStringSubmatch(body)
		if i < 2 && m == nil {
			t.Fatalf("page %d (%d tasks) has no link to the next", i, len(rows))
		}
		if i == 2 {
			if m != nil {
				t.Error("the last page links to a next one")
			}
			break
		}
		page = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if len(seen) != 25 || seen[0] != "0" || seen[10] != "10" || seen[24] != "24" {
		t.Fatalf("tasks listed over three pages: %v", seen)
	}
}

// The dashboard creates the runs page's index when it starts and the index is missing, and
// says so; a role that may not create it is told the statement to run, and the dashboard
// serves anyway.
func TestTheRunsIndexIsCreatedOnStartOrExplained(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	dropIndex := func() {
		if _, err := db.Pool.Exec(ctx, "DROP INDEX IF EXISTS pgflow."+schema.RunsIndex); err != nil {
			t.Fatal(err)
		}
	}
	waitLog := func(log *syncBuffer, want string) {
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(log.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("the log does not say %q within 30 s:\n%s", want, log.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	dropIndex()
	var log syncBuffer
	dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: slog.New(slog.NewTextHandler(&log, nil))})
	waitLog(&log, "created index pgflow."+schema.RunsIndex)
	if !strings.Contains(log.String(), "creating index pgflow."+schema.RunsIndex) {
		t.Errorf("the build's start is not logged:\n%s", log.String())
	}
	if exists, valid, err := schema.RunsIndexValid(ctx, db.Pool); !exists || !valid || err != nil {
		t.Fatalf("after the dashboard started: index exists %v, valid %v (%v)", exists, valid, err)
	}

	dropIndex()
	role := "reader_" + strings.TrimPrefix(db.Name, "t_")
	if len(role) > 60 {
		role = role[:60]
	}
	r := pgx.Identifier{role}.Sanitize()
	for _, sql := range []string{"CREATE ROLE " + r + " LOGIN", "GRANT USAGE ON SCHEMA pgflow TO " + r, "GRANT SELECT ON ALL TABLES IN SCHEMA pgflow TO " + r} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	reader, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reader.Close()
		_, _ = db.Pool.Exec(ctx, "DROP OWNED BY "+r)
		_, _ = db.Pool.Exec(ctx, "DROP ROLE IF EXISTS "+r)
	})
	var readerLog syncBuffer
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: reader, Log: slog.New(slog.NewTextHandler(&readerLog, nil))})
	waitLog(&readerLog, "could not create the runs page's index")
	if l := readerLog.String(); !strings.Contains(l, schema.RunsIndexSQL) || !strings.Contains(l, "must be owner") {
		t.Errorf("the refusal does not say how to create the index by hand, or why:\n%s", l)
	}
	if resp, _ := get(t, srv.URL()+"runs", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the runs page as a read-only role: %d", resp.StatusCode)
	}
}

// tagRE strips a page's tags, to read it as a person does.
var tagRE = regexp.MustCompile(`<[^>]*>`)

// An operator finds a map's failed elements on the run page without paging: the step
// header names them (with links to their rows), the list can show failed elements only,
// and any element can be jumped to.
func TestAMapsFailedElementsAreNamedWithoutPaging(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	id := dashtest.StartManyFail(t, db, 200, []int{17, 42, 180})
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, TasksPerPage: 20})

	_, body := get(t, srv.URL()+"runs/"+id, nil)
	header := regexp.MustCompile(`(?s)<p class="failed-elements">.*?</p>`).FindString(body)
	text := strings.Join(strings.Fields(tagRE.ReplaceAllString(header, "")), " ")
	if !strings.HasPrefix(text, "failed: 17, 42, 180 · show failed only") {
		t.Fatalf("the step header says %q, want the failed elements named:\n%s", text, header)
	}
	if !strings.Contains(body, "197 of 200 elements done · 3 failed") && !strings.Contains(body, "3 failed") {
		t.Errorf("the map's progress does not count the failures")
	}
	link := regexp.MustCompile(`<a href="([^"]+)">180</a>`).FindStringSubmatch(header)
	if link == nil {
		t.Fatalf("element 180 is not a link: %s", header)
	}
	href := strings.ReplaceAll(link[1], "&amp;", "&")
	if !strings.HasSuffix(href, "#task-each-180") {
		t.Errorf("the link to element 180 does not scroll to its row: %s", href)
	}
	_, page := get(t, srv.URL()+strings.TrimPrefix(href, "/"), nil)
	row := regexp.MustCompile(`(?s)<tr id="task-each-180"[^>]*>.*?</tr>`).FindString(page)
	if !strings.Contains(row, `class="jumped"`) || !strings.Contains(row, "must be a non-negative integer") {
		t.Errorf("element 180's page does not show its row marked, with its error: %s", row)
	}

	_, only := get(t, srv.URL()+"runs/"+id+"?step=each&only=failed", nil)
	var rows []string
	for _, m := range regexp.MustCompile(`id="task-each-(\d+)"`).FindAllStringSubmatch(only, -1) {
		rows = append(rows, m[1])
	}
	if strings.Join(rows, ",") != "17,42,180" || !strings.Contains(only, "failed elements 1–3 of 3") || !strings.Contains(only, "show every element") {
		t.Errorf("failed only lists %v", rows)
	}

	_, jumped := get(t, srv.URL()+"runs/"+id+"?step=each&from=137", nil)
	rows = rows[:0]
	for _, m := range regexp.MustCompile(`id="task-each-(\d+)"`).FindAllStringSubmatch(jumped, -1) {
		rows = append(rows, m[1])
	}
	if len(rows) != 20 || rows[0] != "120" || !regexp.MustCompile(`<tr id="task-each-137" [^>]*class="jumped"`).MatchString(jumped) {
		t.Errorf("jumping to element 137 lists %v", rows)
	}
	if !strings.Contains(body, `name="from" min="0" max="199"`) {
		t.Error("the step has no form to jump to an element")
	}

	// More failures than the header names: the rest are counted, with a link to them all.
	many := []int{3, 9, 17, 42, 77, 99, 100, 120, 150, 170, 180, 190, 199}
	id = dashtest.StartManyFail(t, db, 200, many)
	_, body = get(t, srv.URL()+"runs/"+id, nil)
	header = regexp.MustCompile(`(?s)<p class="failed-elements">.*?</p>`).FindString(body)
	text = strings.Join(strings.Fields(tagRE.ReplaceAllString(header, "")), " ")
	if !strings.HasPrefix(text, "failed: 3, 9, 17, 42, 77, 99, 100, 120, 150, 170 +3 more") {
		t.Errorf("with 13 failed elements the header says %q", text)
	}
}

// sseEvent is one Server-Sent Event: its name and data.
type sseEvent struct{ name, data string }

// openStream follows an event stream until the test ends.
func openStream(t *testing.T, rawURL string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", rawURL, resp.StatusCode)
	}
	events := make(chan sseEvent, 64)
	go func() {
		defer resp.Body.Close()
		var ev sseEvent
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				events <- ev
				ev = sseEvent{}
			}
		}
		close(events)
	}()
	return events
}

// waitEvent waits for the named event, skipping others.
func waitEvent(t *testing.T, events <-chan sseEvent, name string, within time.Duration) sseEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before a %q event", name)
			}
			if ev.name == name {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %q event within %s", name, within)
		}
	}
}

// While the database is down, open pages are told so by their event stream and a fresh load
// gets a page that says so (503) and reloads itself; both recover when it is back. A private
// server, stopped and started by the test.
func TestADatabaseOutageIsShownAndRecoveredFrom(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	db := cluster.NewDB(t)
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	id := workertest.StartRun(t, db.Pool, "echo", `{}`) // no worker: it stays running
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, PollInterval: 200 * time.Millisecond})
	_, page := get(t, srv.URL()+"runs/"+id, nil)
	version := regexp.MustCompile(`data-version="([0-9a-f]+)"`).FindStringSubmatch(page)
	if version == nil {
		t.Fatal("the run page has no data-version")
	}
	stream := srv.URL() + "events/runs/" + id + "?v=" + version[1]
	events := openStream(t, stream)

	if err := cluster.Stop(ctx); err != nil {
		t.Fatalf("stopping PostgreSQL: %v", err)
	}
	ev := waitEvent(t, events, "unreachable", 30*time.Second)
	if !strings.HasPrefix(ev.data, "The database is unreachable: ") {
		t.Errorf("the unreachable event says %q", ev.data)
	}
	for _, p := range []string{"runs/" + id, "runs", "flows", "workers"} {
		resp, body := get(t, srv.URL()+p, nil)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			resp.Header.Get("Retry-After") == "" {
			t.Errorf("/%s while the database is down: %d %s (Retry-After %q)", p, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"))
		}
		text := strings.Join(strings.Fields(tagRE.ReplaceAllString(body, " ")), " ")
		if !strings.Contains(text, "The database is unreachable: ") || !strings.Contains(text, "this page retries by itself") ||
			!strings.Contains(body, `<meta http-equiv="refresh" content="5">`) {
			t.Errorf("/%s while the database is down says: %s", p, text)
		}
	}
	resp, body := get(t, srv.URL()+"runs/"+id, http.Header{"X-Live": {"1"}})
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(body, "The database is unreachable: ") {
		t.Errorf("the live part while the database is down: %d %q", resp.StatusCode, body)
	}
	// A page that connects its stream during the outage is told at once.
	waitEvent(t, openStream(t, stream), "unreachable", 30*time.Second)

	if err := cluster.Start(ctx); err != nil {
		t.Fatalf("starting PostgreSQL again: %v", err)
	}
	waitEvent(t, events, "reachable", 60*time.Second)
	resp, body = get(t, srv.URL()+"runs/"+id, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, id) {
		t.Fatalf("the run page after the database came back: %d", resp.StatusCode)
	}
}
