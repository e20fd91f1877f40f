package browsertest_test

// The dashboard in a real browser: Debian's chromium, headless, driven with chromedp, against
// a real database and real workers running modules built from this repository.
//
// UPDATE_SCREENSHOTS=1 also writes the screenshots of docs/ui/ (taken on the example flows
// of flows.yaml): `cd internal/dashboard/browsertest && UPDATE_SCREENSHOTS=1 go test -run TestBrowser .`.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/dashtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// UpdateScreenshotsEnv names the variable that makes TestBrowser rewrite docs/ui/*.png.
const UpdateScreenshotsEnv = "UPDATE_SCREENSHOTS"

// chromiumPath finds the browser; the tests skip only when it is not installed.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("the browser tests need Debian's chromium: `make deps` installs it (scripts/install-apt-packages.sh), " +
		"or `apt-get install chromium`; set CHROMIUM=/path/to/chromium for another one")
	return ""
}

// newBrowser starts a headless chromium for the test: no network but ours, a fresh profile.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // root in a container has no user namespaces for it
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		// Its shared-memory files (disable-dev-shm-usage puts them in the temporary folder)
		// go with the test's own folder, not left in /tmp.
		chromedp.Env("TMPDIR=" + t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-extensions", true),
		// Event streams and timers must keep running in a tab nobody looks at.
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(func(string, ...any) {}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// tab opens a new tab of the browser for one subtest.
func tab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	// The first run opens the tab, which lives as long as that run's context: give it one
	// without a time limit (later actions get their own).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	return ctx
}

// within runs a browser action with a time limit.
func within[T any](t *testing.T, ctx context.Context, d time.Duration, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		v, err := chromedp.Run(c, a)
		// A live page swaps its content in every refresh: the node an action found may be
		// gone before the action reaches it. A person would click again; so does the test.
		if err != nil && c.Err() == nil && nodeReplaced(err) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
		return v
	}
}

// nodeReplaced says whether err is the browser's answer about a node that left the page.
func nodeReplaced(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "No node with given id found") || strings.Contains(msg, "Node is detached from document") ||
		strings.Contains(msg, "Could not find node with given id") || strings.Contains(msg, "Could not compute box model")
}

func navigate(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	within(t, ctx, 60*time.Second, chromedp.Navigate(u))
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return within(t, ctx, 30*time.Second, chromedp.Evaluate[T](js))
}

// setValue types value into the field selector finds, as it is in the page at that moment:
// a node found first and written later may have been swapped out by a live refresh in
// between, and a value written to it would be lost without an error. The page keeps a
// typed value across its refreshes.
func setValue(t *testing.T, ctx context.Context, selector, value string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const f = document.querySelector(%s); if (!f) return false; f.value = %s; return true; })()`,
		jsString(selector), jsString(value))
	waitFor(t, ctx, js, 30*time.Second, "the field "+selector+" to type into")
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// waitFor waits until the JavaScript expression is true in the page. It polls from Go:
// chromedp's Poll builds a function in the page, which the dashboard's Content-Security-Policy
// (no 'unsafe-eval') rightly refuses.
func waitFor(t *testing.T, ctx context.Context, js string, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := chromedp.Run(c, chromedp.Evaluate[bool]("Boolean("+js+")"))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	text, _ := chromedp.Run(c, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	t.Fatalf("%s: not within %s (last error: %v); the page says:\n%s", what, d, last, text)
}

// screenshot writes docs/ui/<name>.png when UPDATE_SCREENSHOTS is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv(UpdateScreenshotsEnv) == "" {
		return
	}
	png := within(t, ctx, 60*time.Second, chromedp.FullScreenshot(100))
	path := filepath.Join(workertest.RepoRoot(t), "docs", "ui", name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// chattyWorkerLog is a worker's log at every level, shown only if the test fails.
func chattyWorkerLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(workertest.TestWriter{T: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// explainRunsOnFailure logs every run's and task's state if the test fails: a page that
// waited in vain for a run says where the run stopped.
func explainRunsOnFailure(t *testing.T, pool *pgxpool.Pool) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, err := pool.Query(context.Background(), `select r.run_id::text, r.flow_slug, r.status, coalesce(t.step_slug, ''),
			coalesce(t.status, ''), coalesce(t.attempts_count, 0), coalesce(t.queued_at::text, ''), coalesce(t.error_message, '')
			from pgflow.runs r left join pgflow.step_tasks t using (run_id) order by r.started_at, t.queued_at`)
		if err != nil {
			t.Logf("reading the runs' states: %v", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var run, flow, status, step, taskStatus, queuedAt, msg string
			var attempts int
			if err := rows.Scan(&run, &flow, &status, &step, &taskStatus, &attempts, &queuedAt, &msg); err != nil {
				t.Logf("reading the runs' states: %v", err)
				return
			}
			t.Logf("run %s (%s) %s: task %s %s, %d attempts, queued %s %s", run, flow, status, step, taskStatus, attempts, queuedAt, msg)
		}
	})
}

func TestBrowser(t *testing.T) {
	browser := newBrowser(t)
	t.Run("example flows: every page", func(t *testing.T) { examplePages(t, browser) })
	t.Run("test flows: token, errors, escaping, live", func(t *testing.T) { testFlows(t, browser) })
	t.Run("actions: the Start run and Deprecate buttons", func(t *testing.T) { actionsFromThePage(t, browser) })
	t.Run("actions: Cancel, Rerun, Drain and Undrain", func(t *testing.T) { operatorActions(t, browser) })
	t.Run("failures grouped by their shape", func(t *testing.T) { failureShapes(t, browser) })
	t.Run("a map's failed elements", func(t *testing.T) { failedElements(t, browser) })
	t.Run("the database goes away and comes back", func(t *testing.T) { databaseOutage(t, browser) })
	t.Run("mounted on /ops/ of another server", func(t *testing.T) { mountedOnAPath(t, browser) })
	t.Run("graph: every edge visible, external steps marked", func(t *testing.T) { graphEdges(t, browser) })
	t.Run("the header's search box", func(t *testing.T) { searchBox(t, browser) })
	t.Run("stats and failures of a flow with 1,000 runs", func(t *testing.T) { statsPage(t, browser) })
	t.Run("a flow's schedule", func(t *testing.T) { scheduleOnTheFlowsPage(t, browser) })
	t.Run("a task's earlier attempts", func(t *testing.T) { earlierAttempts(t, browser) })
}

// earlierAttempts runs a step that fails twice and then completes, and one that fails on
// each of its two attempts: each task's row shows the attempts before its last.
func earlierAttempts(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	workertest.StartWorker(t, db.Pool, workertest.FlowsFile(t, `
flows:
  - slug: retrying
    max_attempts: 3
    base_delay: 0
    steps:
      - {slug: flaky, module: {{root}}/modules/testdata/flaky.wasm}
      - {slug: doomed, depends_on: [flaky], max_attempts: 2, module: {{root}}/modules/testdata/fail.wasm}
`, nil), worker.Config{Signal: pgflowtype.SignalNotify})
	id := workertest.StartRun(t, db.Pool, "retrying", `{"succeed_on": 3}`)
	if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "failed" {
		t.Fatalf("run %s: %s, want failed", id, r.Status)
	}
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog()})
	ctx := tab(t, browser)
	navigate(t, ctx, srv.URL()+"runs/"+id)
	waitFor(t, ctx, `document.querySelectorAll('#task-flaky-0 .attempts li').length === 2 && document.querySelectorAll('#task-doomed-0 .attempts li').length === 1`,
		10*time.Second, "flaky's row lists two earlier attempts, doomed's one")
	if got := eval[[]string](t, ctx, `[...document.querySelectorAll('#task-flaky-0 .attempts li')].map(li => li.innerText)`); len(got) != 2 ||
		!strings.Contains(got[0], "attempt 1 failed") || !strings.Contains(got[1], "attempt 2 failed") {
		t.Errorf("flaky's earlier attempts: %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector('#task-doomed-0 .task-error').innerText`); !strings.HasPrefix(got, "attempt 2:") {
		t.Errorf("doomed's last error reads %q, want it named attempt 2", got)
	}
	screenshot(t, ctx, "run-attempts")
}

// scheduleOnTheFlowsPage serves a flow scheduled every second until a tick started a run:
// the flows page shows the schedule, and its last run is a click away.
func scheduleOnTheFlowsPage(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, `
flows:
  - slug: nightly_report
    schedule:
      cron: "* * * * * *"
      timezone: Europe/Berlin
    steps:
      - {slug: gather, module: {{root}}/modules/testdata/echo.wasm}
      - {slug: publish, depends_on: [gather], module: {{root}}/modules/testdata/echo.wasm}
`, nil)
	w := workertest.StartWorker(t, db.Pool, file, worker.Config{Signal: pgflowtype.SignalNotify})
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog(),
		Flows: func() *flowfile.File { return file }, Modules: w.ModuleInfo})
	ctx := tab(t, browser)
	// Until the first tick's row is there, the page says "none yet"; reload until it is not.
	deadline := time.Now().Add(60 * time.Second)
	for {
		navigate(t, ctx, srv.URL()+"flows")
		if eval[bool](t, ctx, `document.querySelector('#flow-nightly_report .schedule a.last-run') !== null`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no last tick on the flows page within 60 s:\n%s", eval[string](t, ctx, `document.body.innerText`))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := w.Stop(t); err != nil {
		t.Fatal(err)
	}
	navigate(t, ctx, srv.URL()+"flows")
	text := eval[string](t, ctx, `document.querySelector('#flow-nightly_report .schedule').innerText`)
	if !strings.Contains(text, "* * * * * * (Europe/Berlin)") || !strings.Contains(text, "next tick") || !strings.Contains(text, "last tick") {
		t.Errorf("the schedule line says %q", text)
	}
	screenshot(t, ctx, "flows-schedule")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#flow-nightly_report .schedule a.last-run`)))
	waitFor(t, ctx, `location.pathname.startsWith('/runs/') && document.querySelector('dl.facts dd a')?.textContent === 'nightly_report'`,
		10*time.Second, "the last tick's run page")
}

// statsPage shows the stats of 1,000 runs: every chart is on screen with bars of height; and
// their 100 failures in one group, whose latest run is a click away.
func statsPage(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	dashtest.StartStatsRuns(t, db, 1000)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog()})
	ctx := tab(t, browser)
	navigate(t, ctx, srv.URL()+"stats")
	waitFor(t, ctx, `document.querySelectorAll('#stats-busy svg.chart').length === 8`, 10*time.Second, "busy's eight charts")
	if n := eval[int](t, ctx, `[...document.querySelectorAll('#stats-busy svg.chart')].filter(svg => {
		const r = svg.getBoundingClientRect();
		return r.width > 100 && r.height > 20 && [...svg.querySelectorAll('rect.bar')].some(b => b.getBBox().height > 1); }).length`); n != 8 {
		t.Errorf("%d of busy's 8 charts are drawn with bars of height", n)
	}
	screenshot(t, ctx, "stats")

	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`header nav a[href="/failures"]`)))
	waitFor(t, ctx, `document.querySelector('table.failures tr[data-steps~="busy/work"]')?.dataset.tasks === '100'`, 10*time.Second,
		"the failures page groups busy's 100 failed tasks")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`table.failures tr[data-steps~="busy/work"] a.latest`)))
	waitFor(t, ctx, `(() => { const r = document.querySelector('#task-work-0');
		return location.pathname.startsWith('/runs/') && r && r.matches(':target') && r.innerText.includes('the input was refused'); })()`,
		10*time.Second, "the latest run's failed task, in view")
}

// searchBox types run ids into the header's search box: 8 characters of one run's id open its
// page, the beginning of several ids lists them.
func searchBox(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, testFlowsYAML, nil))
	ids := []string{"c0ffee00-1111-4000-8000-000000000001", "c0ffee00-2222-4000-8000-000000000002", "c0ffee01-3333-4000-8000-000000000003"}
	for _, id := range ids { // pgflow's own start_flow, with chosen ids
		if _, err := db.Pool.Exec(context.Background(), `select pgflow.start_flow(flow_slug => 'echo_out', input => '{}'::jsonb, run_id => $1::uuid)`, id); err != nil {
			t.Fatal(err)
		}
	}
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog()})
	ctx := tab(t, browser)
	navigate(t, ctx, srv.URL()+"flows")
	search := func(text string) {
		t.Helper()
		setValue(t, ctx, `header form.search input[name=q]`, text)
		within(t, ctx, 30*time.Second, chromedp.Submit(chromedp.CSS(`header form.search input[name=q]`)))
	}
	search("C0FFEE01")
	waitFor(t, ctx, `location.pathname === '/runs/`+ids[2]+`' && document.querySelector('h1 .id')?.textContent === '`+ids[2]+`'`,
		10*time.Second, "8 characters of one run's id open that run's page")
	search("c0ffee00")
	waitFor(t, ctx, `location.pathname === '/search' && document.querySelectorAll('table.runs tr[data-run]').length === 2`,
		10*time.Second, "the beginning of two runs' ids lists both")
	if got := eval[[]string](t, ctx, `[...document.querySelectorAll('table.runs tr[data-run]')].map(r => r.dataset.run).sort()`); !slices.Equal(got, ids[:2]) {
		t.Errorf("listed %v, want %v", got, ids[:2])
	}
	screenshot(t, ctx, "search")
}

// graphFlowsYAML has a fan-in (join after four steps) with edges that skip one and two
// columns past the boxes between, and a flow of 30 steps (a map first) whose edges skip up to
// five columns.
var graphFlowsYAML = `
flows:
  - slug: fan_in
    steps:
      - {slug: start, module: {{root}}/modules/testdata/echo.wasm}
      - {slug: left, depends_on: [start], module: {{root}}/modules/testdata/echo.wasm}
      - {slug: right, depends_on: [start], module: {{root}}/modules/testdata/echo.wasm}
      - {slug: middle, depends_on: [left], module: {{root}}/modules/testdata/echo.wasm}
      - {slug: join, depends_on: [start, left, right, middle], module: {{root}}/modules/testdata/echo.wasm}
  - slug: thirty
    steps:
      - {slug: s00, type: map, module: {{root}}/modules/testdata/echo.wasm}
` + thirtySteps()

// thirtySteps are s01..s29: each after the one before and the one three back; every fifth
// after the five before it.
func thirtySteps() string {
	var b strings.Builder
	for i := 1; i < 30; i++ {
		deps := []string{fmt.Sprintf("s%02d", i-1)}
		switch {
		case i%5 == 0:
			deps = nil
			for j := i - 5; j < i; j++ {
				deps = append(deps, fmt.Sprintf("s%02d", j))
			}
		case i >= 3:
			deps = append(deps, fmt.Sprintf("s%02d", i-3))
		}
		fmt.Fprintf(&b, "      - {slug: s%02d, depends_on: [%s], module: {{root}}/modules/testdata/echo.wasm}\n", i, strings.Join(deps, ", "))
	}
	return b.String()
}

// graphGeometry reads the run page's graph and checks every edge on the SVG's own geometry
// (the browser's path lengths and points, not the server's numbers): it starts on its
// source box's right side, ends just before its target box's left side (the arrowhead fills
// the gap), and no point of it lies inside any box. It returns the edges as "from>to" and
// the problems found.
const graphGeometry = `(() => {
	const svg = document.querySelector('.graph svg'), boxes = {}, edges = [], problems = [];
	for (const g of svg.querySelectorAll('g.node')) {
		const r = g.querySelector('rect');
		boxes[g.dataset.step] = {x: r.x.baseVal.value, y: r.y.baseVal.value, w: r.width.baseVal.value, h: r.height.baseVal.value};
	}
	const inside = (q, r) => q.x > r.x + 0.5 && q.x < r.x + r.w - 0.5 && q.y > r.y + 0.5 && q.y < r.y + r.h - 0.5;
	for (const p of svg.querySelectorAll('path.edge')) {
		const from = p.dataset.from, to = p.dataset.to, a = boxes[from], b = boxes[to], name = from + '>' + to;
		edges.push(name);
		if (!a || !b) { problems.push(name + ': no box at an end'); continue; }
		if (getComputedStyle(p).stroke === 'none' || getComputedStyle(p).visibility !== 'visible') problems.push(name + ': not drawn');
		const len = p.getTotalLength(), s = p.getPointAtLength(0), e = p.getPointAtLength(len);
		if (Math.abs(s.x - (a.x + a.w)) > 1 || s.y <= a.y || s.y >= a.y + a.h) problems.push(name + ': starts at ' + s.x + ',' + s.y + ', not on ' + from + "'s right side");
		if (e.x > b.x || e.x < b.x - 8 || e.y <= b.y || e.y >= b.y + b.h) problems.push(name + ': ends at ' + e.x + ',' + e.y + ', not at ' + to + "'s left side");
		for (let l = 0; l <= len; l += 0.5) {
			const q = p.getPointAtLength(l);
			for (const [slug, r] of Object.entries(boxes)) {
				if (inside(q, r)) { problems.push(name + ' passes through ' + slug + ' at ' + q.x.toFixed(1) + ',' + q.y.toFixed(1)); l = len + 1; break; }
			}
		}
	}
	return {edges: edges.sort(), problems: problems};
})()`

type geometry struct {
	Edges    []string `json:"edges"`
	Problems []string `json:"problems"`
}

// graphEdges opens the run pages of graphFlowsYAML's flows: every dependency is one edge,
// drawn clear of every box, and the step the flows file marks external says so.
func graphEdges(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, graphFlowsYAML, nil)
	w := workertest.StartWorker(t, db.Pool, file, worker.Config{Signal: pgflowtype.SignalNotify})
	id := workertest.StartRun(t, db.Pool, "fan_in", `{}`)
	if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
		t.Fatalf("run %s: %s %s", id, r.Status, r.Error)
	}
	if err := w.Stop(t); err != nil {
		t.Fatal(err)
	}
	thirty := workertest.StartRun(t, db.Pool, "thirty", `[1, 2, 3]`) // no worker: it stays started
	// The flows file the dashboard is told of has pgflow's own worker serve right (pgflow
	// 0.8.1 cannot compile a split flow: the database's flow is the one without it).
	shown := workertest.FlowsFile(t, strings.Replace(graphFlowsYAML,
		"{slug: right, depends_on: [start], module: {{root}}/modules/testdata/echo.wasm}",
		"{slug: right, depends_on: [start], external: true}", 1), nil)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog(),
		Flows: func() *flowfile.File { return shown }})
	ctx := tab(t, browser)
	base := strings.TrimSuffix(srv.URL(), "/")

	for _, c := range []struct {
		run  string
		file *flowfile.Flow
	}{{id, file.Flow("fan_in")}, {thirty, file.Flow("thirty")}} {
		navigate(t, ctx, base+"/runs/"+c.run)
		waitFor(t, ctx, fmt.Sprintf(`document.querySelectorAll('.graph g.node').length === %d`, len(c.file.Steps)),
			10*time.Second, "the graph of "+c.file.Slug+" shows its steps")
		var want []string
		for _, st := range c.file.Steps {
			for _, d := range st.DependsOn {
				want = append(want, d+">"+st.Slug)
			}
		}
		slices.Sort(want)
		g := eval[geometry](t, ctx, graphGeometry)
		if !slices.Equal(g.Edges, want) {
			t.Errorf("%s: the graph's edges %v, want one per dependency %v", c.file.Slug, g.Edges, want)
		}
		for _, p := range g.Problems {
			t.Errorf("%s: %s", c.file.Slug, p)
		}
		if c.run == id {
			screenshot(t, ctx, "run-graph")
		}
	}

	navigate(t, ctx, base+"/runs/"+id)
	waitFor(t, ctx, `document.querySelectorAll('.graph g.node.st-completed').length === 5`, 10*time.Second, "the fan-in's steps are completed")
	if got := eval[[]string](t, ctx, `[...document.querySelectorAll('.graph g.node.external')].map(g => g.dataset.step)`); !slices.Equal(got, []string{"right"}) {
		t.Errorf("steps marked external on the graph: %v, want [right]", got)
	}
	if !eval[bool](t, ctx, `(() => { const g = document.querySelector('.graph g.node.external');
		return g.querySelector('.node-external').textContent === 'external' && getComputedStyle(g.querySelector('rect')).strokeDasharray !== 'none'; })()`) {
		t.Error("the external step's box is not dashed and labelled external")
	}
}

// mountedOnAPath serves the dashboard on /ops/ of another server (dashboard.New and its
// Handler, as Client.DashboardHandler does): the page's style and script load from under the
// path, its event stream opens there and follows the run, and links and forms stay there.
func mountedOnAPath(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	file := workertest.FlowsFile(t, testFlowsYAML, nil)
	workertest.Compile(t, db.Pool, file)
	id := workertest.StartRun(t, db.Pool, "echo_out", `{}`) // no worker yet: it keeps running
	// A long poll interval: the page must learn of the run's end through its event stream.
	d, err := dashboard.New(context.Background(), dashboard.Config{Pool: db.Pool, Log: quietLog(), BasePath: "/ops",
		Actions: true, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	mux := http.NewServeMux()
	mux.Handle("/ops/", d.Handler())
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("the host's own page")) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx := tab(t, browser)
	navigate(t, ctx, srv.URL+"/ops/runs/"+id)
	waitFor(t, ctx, `document.getElementById('conn').classList.contains('on') && document.styleSheets.length === 1 &&
		document.styleSheets[0].href.includes('/ops/static/app.css') && document.styleSheets[0].cssRules.length > 10`,
		10*time.Second, "the style sheet loaded from /ops/static/ and the live dot is green (the script, and its stream under /ops/)")
	explainRunsOnFailure(t, db.Pool)
	workertest.StartWorker(t, db.Pool, file, worker.Config{Signal: pgflowtype.SignalNotify, Log: chattyWorkerLog(t)})
	waitFor(t, ctx, `document.querySelector('h1 .badge')?.textContent === 'completed' && location.pathname === '/ops/runs/`+id+`'`,
		30*time.Second, "the open page follows the run to its end")

	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`header nav a[href="/ops/flows"]`)))
	waitFor(t, ctx, `location.pathname === '/ops/flows' && document.getElementById('start-echo_out') !== null`,
		30*time.Second, "the navigation leads to the flows page under /ops/")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#start-echo_out summary`)))
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#start-echo_out button[type=submit]`)))
	waitFor(t, ctx, `location.pathname.startsWith('/ops/runs/') && location.pathname !== '/ops/runs/`+id+`' &&
		document.querySelector('h1 .badge')?.textContent === 'completed'`,
		30*time.Second, "Start run posts under /ops/ and leads to the new run's page there")
}

// databaseOutage stops the dashboard's PostgreSQL (a private one) under an open run page
// and a fresh load, then starts it again.
func databaseOutage(t *testing.T, browser context.Context) {
	cluster := pgtest.NewCluster(t)
	db := cluster.NewDB(t)
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, testFlowsYAML, nil))
	id := workertest.StartRun(t, db.Pool, "echo_out", `{}`) // no worker: it keeps running
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog(), PollInterval: 200 * time.Millisecond})
	runPage := srv.URL() + "runs/" + id
	open := tab(t, browser)
	navigate(t, open, runPage)
	waitFor(t, open, `document.getElementById('conn').classList.contains('on')`, 10*time.Second, "the live dot is green")
	runningFor := `document.querySelector('dl.facts [data-since]').textContent`
	ctx := context.Background()

	if err := cluster.Stop(ctx); err != nil {
		t.Fatalf("stopping PostgreSQL: %v", err)
	}
	waitFor(t, open, `(() => { const b = document.getElementById('db-down'), c = document.getElementById('conn');
		return !b.hidden && b.offsetParent !== null && b.textContent.startsWith('The database is unreachable: ') &&
			c.classList.contains('down') && !c.classList.contains('on'); })()`,
		30*time.Second, "the open page says the database is unreachable and its dot is red")
	before := eval[string](t, open, runningFor)
	time.Sleep(1500 * time.Millisecond)
	if after := eval[string](t, open, runningFor); after != before {
		t.Errorf("'running for' went on counting while the database was away: %q, then %q", before, after)
	}
	screenshot(t, open, "run-db-down")

	fresh := tab(t, browser)
	resp := within(t, fresh, 60*time.Second, chromedp.NavigateResponse(runPage))
	if text := eval[string](t, fresh, `document.body.innerText`); resp.Status != 503 ||
		!strings.Contains(text, "The database is unreachable: ") || !strings.Contains(text, "this page retries by itself") {
		t.Errorf("a fresh load while the database is away: HTTP %d, %q", resp.Status, text)
	}

	if err := cluster.Start(ctx); err != nil {
		t.Fatalf("starting PostgreSQL again: %v", err)
	}
	waitFor(t, open, `document.getElementById('db-down').hidden && document.getElementById('conn').classList.contains('on')`,
		30*time.Second, "the open page drops the banner and its dot is green again")
	before = eval[string](t, open, runningFor)
	time.Sleep(1500 * time.Millisecond)
	if after := eval[string](t, open, runningFor); after == before {
		t.Errorf("'running for' stays at %q once the database is back", after)
	}
	waitFor(t, fresh, fmt.Sprintf(`location.href === %q && document.querySelector('h1 .badge')?.textContent === 'started'`, runPage),
		30*time.Second, "the page loaded during the outage shows the run by itself once the database is back")
}

// failedElements opens a run whose map of 200 elements had 3 fail: the step's header names
// them, and a click on one shows its row and error.
func failedElements(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	id := dashtest.StartManyFail(t, db, 200, []int{17, 42, 180})
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog()})
	ctx := tab(t, browser)
	navigate(t, ctx, srv.URL()+"runs/"+id)
	waitFor(t, ctx, `document.querySelector('#step-each .failed-elements')?.innerText.startsWith('failed: 17, 42, 180')`,
		10*time.Second, "the map step's header names its failed elements")
	screenshot(t, ctx, "run-map-failed")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#step-each .failed-elements a[href$="#task-each-180"]`)))
	waitFor(t, ctx, `(() => { const r = document.querySelector('#task-each-180');
		return r && r.matches(':target') && r.getBoundingClientRect().top > -2 && r.getBoundingClientRect().top < innerHeight &&
			r.innerText.includes('must be a non-negative integer'); })()`,
		10*time.Second, "a click on 180 shows element 180's row, in view, with its error")
}

// actionsFromThePage clicks the dashboard's own buttons in the browser: the browser, not
// the test, decides which Origin, Sec-Fetch-Site and Referer headers the forms send.
func actionsFromThePage(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	w := workertest.StartWorker(t, db.Pool, workertest.FlowsFile(t, testFlowsYAML, nil), worker.Config{Signal: pgflowtype.SignalNotify})
	var log workertest.SyncBuffer
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: slog.New(slog.NewTextHandler(&log, nil)),
		Actions: true, PollInterval: 200 * time.Millisecond})
	base := strings.TrimSuffix(srv.URL(), "/")
	ctx := tab(t, browser)
	// The Deprecate button asks for confirmation (window.confirm): say yes.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	dbCtx := context.Background()

	navigate(t, ctx, base+"/flows")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#start-echo_out summary`)))
	setValue(t, ctx, `#input-echo_out`, `{"value": "from the browser"}`)
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`#start-echo_out button[type=submit]`)))
	waitFor(t, ctx, `location.pathname.startsWith('/runs/') && document.querySelector('h1 .badge')?.textContent === 'completed'`,
		30*time.Second, "Start run leads to the new run's page, which shows it completed")
	id := strings.TrimPrefix(eval[string](t, ctx, `location.pathname`), "/runs/")
	var input string
	if err := db.Pool.QueryRow(dbCtx, `select input::text from pgflow.runs where run_id = $1::uuid and flow_slug = 'echo_out'`, id).Scan(&input); err != nil {
		t.Fatalf("the run %s the page shows is not in the database: %v\nlog:\n%s", id, err, log.String())
	}
	if !strings.Contains(input, "from the browser") {
		t.Errorf("the run's input is %s, want the one typed into the form", input)
	}

	worker := w.WorkerIDs()["echo_out"]
	navigate(t, ctx, base+"/workers")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-worker=%q] button.danger`, worker))))
	waitFor(t, ctx, fmt.Sprintf(`location.pathname === '/workers' && document.querySelector('tr[data-worker=%q] .badge.st-deprecated') !== null`, worker),
		30*time.Second, "Deprecate leads back to the workers page, which shows the worker deprecated")
	var deprecated bool
	if err := db.Pool.QueryRow(dbCtx, `select deprecated_at is not null from pgflow.workers where worker_id = $1::uuid`, worker).Scan(&deprecated); err != nil || !deprecated {
		t.Fatalf("worker %s deprecated in the database: %v (%v)", worker, deprecated, err)
	}
	if l := log.String(); !strings.Contains(l, "started a run") || !strings.Contains(l, "deprecated a worker") || strings.Contains(l, "refused") {
		t.Errorf("the dashboard's log:\n%s", l)
	}
}

// operatorActions clicks Cancel and Rerun on run pages and Drain and Undrain on the workers
// page, and checks what each did in the database, its audit record, and the rerun links
// shown both ways.
func operatorActions(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	w := workertest.StartWorker(t, db.Pool, workertest.FlowsFile(t, `
flows:
  - slug: echo_out
    steps:
      - {slug: echo, module: {{root}}/modules/testdata/echo.wasm}
  - slug: spinning
    max_attempts: 1
    timeout: 120
    steps:
      - {slug: spin, module: {{root}}/modules/testdata/spin.wasm}
`, nil), worker.Config{Signal: pgflowtype.SignalNotify, HeartbeatInterval: 200 * time.Millisecond})
	<-w.Started()
	var log workertest.SyncBuffer
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: slog.New(slog.NewTextHandler(&log, nil)),
		Actions: true, PollInterval: 200 * time.Millisecond})
	base := strings.TrimSuffix(srv.URL(), "/")
	ctx := tab(t, browser)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening) // Cancel and Drain ask first: say yes
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	dbCtx := context.Background()
	audit := func(action, id string) string {
		t.Helper()
		var actor string
		if err := db.Pool.QueryRow(dbCtx, `select actor from pgflow_wasm.operator_actions
			where action = $1 and (run_id = $2::uuid or process_id = $2::uuid) order by id desc limit 1`, action, id).Scan(&actor); err != nil {
			t.Fatalf("no %s of %s in pgflow_wasm.operator_actions: %v", action, id, err)
		}
		if !strings.HasPrefix(actor, "dashboard 127.0.0.1:") {
			t.Errorf("the %s is recorded as done by %q, want the dashboard and the browser's address", action, actor)
		}
		return actor
	}

	// Cancel: a handler that never ends stops, and the run fails.
	spin := workertest.StartRun(t, db.Pool, "spinning", `{}`)
	navigate(t, ctx, base+"/runs/"+spin)
	waitFor(t, ctx, `document.querySelector('#task-spin-0')?.dataset.status === 'started'`, 30*time.Second, "the spinning task runs")
	setValue(t, ctx, `form.cancel-run input[name=reason]`, `stuck in a loop`)
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`form.cancel-run button`)))
	waitFor(t, ctx, `document.querySelector('h1 .badge')?.textContent === 'failed' && !document.querySelector('form.cancel-run')`,
		30*time.Second, "Cancel leads back to the run, failed, with no Cancel button")
	if r := workertest.WaitRun(t, db.Pool, spin, 30*time.Second); r.Status != "failed" {
		t.Fatalf("the cancelled run is %s", r.Status)
	}
	var taskErr string
	if err := db.Pool.QueryRow(dbCtx, `select error_message from pgflow.step_tasks where run_id = $1::uuid`, spin).Scan(&taskErr); err != nil ||
		!strings.Contains(taskErr, "stuck in a loop") {
		t.Errorf("the cancelled task's error: %q (%v), want the reason typed in", taskErr, err)
	}
	audit("cancel", spin)

	// Rerun: a new run with the same input, linked both ways.
	orig := workertest.StartRun(t, db.Pool, "echo_out", `{"value": "again"}`)
	workertest.WaitRun(t, db.Pool, orig, 30*time.Second)
	navigate(t, ctx, base+"/runs/"+orig)
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`form.rerun-run button`)))
	waitFor(t, ctx, fmt.Sprintf(`location.pathname.startsWith('/runs/') && location.pathname !== '/runs/%s' &&
		document.querySelector('.rerun-of a')?.getAttribute('href') === '/runs/%s' && document.querySelector('h1 .badge')?.textContent === 'completed'`, orig, orig),
		30*time.Second, "Rerun leads to the new run's page, which links its original and completes")
	rerun := strings.TrimPrefix(eval[string](t, ctx, `location.pathname`), "/runs/")
	var sameInput bool
	if err := db.Pool.QueryRow(dbCtx, `select a.input = b.input from pgflow.runs a, pgflow.runs b where a.run_id = $1::uuid and b.run_id = $2::uuid`,
		orig, rerun).Scan(&sameInput); err != nil || !sameInput {
		t.Errorf("the rerun %s has the original's input: %v (%v)", rerun, sameInput, err)
	}
	navigate(t, ctx, base+"/runs/"+orig)
	waitFor(t, ctx, fmt.Sprintf(`[...document.querySelectorAll('.reruns a')].map(a => a.getAttribute('href')).join() === '/runs/%s'`, rerun),
		10*time.Second, "the original's page links its rerun")
	audit("rerun", orig)

	// Drain: the process takes no new task of any flow; Undrain: it takes them again.
	proc := w.ProcessID()
	row := fmt.Sprintf(`tr[data-process=%q]`, proc)
	navigate(t, ctx, base+"/workers")
	waitFor(t, ctx, fmt.Sprintf(`document.querySelector('%s .flows')?.innerText === 'echo_out, spinning'`, row), 10*time.Second,
		"the workers page lists the process with its flows")
	if host, _ := os.Hostname(); !strings.Contains(eval[string](t, ctx, fmt.Sprintf(`document.querySelector('%s').innerText`, row)), host) {
		t.Errorf("the process's row does not name its host %s", host)
	}
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(row+` form.drain button`)))
	waitFor(t, ctx, fmt.Sprintf(`location.pathname === '/workers' && document.querySelector('%s .badge.st-drained') && document.querySelector('%s form.undrain')`, row, row),
		30*time.Second, "Drain leads back to the workers page, which shows the process drained")
	deadline := time.Now().Add(30 * time.Second)
	for !w.Drained() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !w.Drained() {
		t.Fatal("the worker did not see the drain within 30 s")
	}
	waiting := workertest.StartRun(t, db.Pool, "echo_out", `{"value": "waits"}`)
	time.Sleep(time.Second)
	var status string
	if err := db.Pool.QueryRow(dbCtx, `select status from pgflow.runs where run_id = $1::uuid`, waiting).Scan(&status); err != nil || status != "started" {
		t.Fatalf("a run started while drained: %s (%v), want it waiting", status, err)
	}
	audit("drain", proc)
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(row+` form.undrain button`)))
	waitFor(t, ctx, fmt.Sprintf(`location.pathname === '/workers' && !document.querySelector('%s .badge.st-drained') && document.querySelector('%s form.drain')`, row, row),
		30*time.Second, "Undrain leads back to the workers page, which shows the process serving")
	if r := workertest.WaitRun(t, db.Pool, waiting, 30*time.Second); r.Status != "completed" {
		t.Fatalf("the run that waited is %s after the undrain", r.Status)
	}
	audit("undrain", proc)
	l := log.String()
	for _, want := range []string{"cancelled a run", "reran a run", "drained a worker process", "undrained a worker process"} {
		if !strings.Contains(l, want) {
			t.Errorf("the dashboard's log has no %q:\n%s", want, l)
		}
	}
	if strings.Contains(l, "refused") {
		t.Errorf("an action was refused:\n%s", l)
	}
}

// failureShapes shows 61 failures of three causes as three groups, each with its sparkline
// drawn, and a click on a group's latest run opens that failure.
func failureShapes(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	causes := dashtest.StartShapedFailures(t, db)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog()})
	ctx := tab(t, browser)
	navigate(t, ctx, srv.URL()+"failures")
	waitFor(t, ctx, `document.querySelectorAll('table.failures tbody tr').length > 0`, 10*time.Second, "the failures page lists groups")
	got := eval[[]string](t, ctx, `[...document.querySelectorAll('table.failures tbody tr')].map(r =>
		r.dataset.tasks + ' ' + r.dataset.steps + ' | ' + r.querySelector('.shape').textContent)`)
	var want []string
	for _, c := range causes {
		want = append(want, fmt.Sprintf("%d %s | %s", c.Tasks, strings.Join(c.Steps, " "), c.Shape))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := eval[int](t, ctx, `[...document.querySelectorAll('table.failures svg.sparkline')].filter(svg =>
		[...svg.querySelectorAll('rect')].some(b => b.getBBox().height > 0)).length`); n != 3 {
		t.Errorf("%d of the 3 sparklines have a bar drawn", n)
	}
	screenshot(t, ctx, "failures")
	within(t, ctx, 30*time.Second, chromedp.Click(chromedp.CSS(`table.failures tbody tr:nth-child(3) a.latest`)))
	waitFor(t, ctx, `(() => { const r = document.querySelector('#task-decode-0');
		return location.pathname.startsWith('/runs/') && r && r.innerText.includes('decoding invoice'); })()`,
		10*time.Second, "the latest failure of the third group")
}

// examplePages serves the repository's flows.yaml, runs each example flow, and looks at
// every page (and takes the screenshots of docs/ui/).
func examplePages(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	file, err := flowfile.Load("../../../flows.yaml") // the page shows the path as given
	if err != nil {
		t.Fatalf("flows.yaml: %v (are the examples built? `make examples`)", err)
	}
	// The ledger flow's table and role, as make run makes them.
	if ledger, err := os.ReadFile(filepath.Join(workertest.RepoRoot(t), "scripts", "ledger.sql")); err != nil {
		t.Fatal(err)
	} else if _, err := db.Pool.Exec(context.Background(), string(ledger)); err != nil {
		t.Fatalf("scripts/ledger.sql: %v", err)
	}
	w := workertest.StartWorker(t, db.Pool, file, worker.Config{Signal: pgflowtype.SignalNotify})
	words := workertest.StartRun(t, db.Pool, "word_totals",
		`["the quick brown fox", "jumps over the lazy dog", "pack my box with", "five dozen liquor jugs"]`)
	ada := workertest.StartRun(t, db.Pool, "hello", `{"name": "Ada"}`)
	bad := workertest.StartRun(t, db.Pool, "hello", `{"nam": "Ada"}`)
	more := []string{words, ada}
	for _, name := range []string{"Grace", "Edsger", "Barbara"} {
		more = append(more, workertest.StartRun(t, db.Pool, "hello", `{"name": "`+name+`"}`))
	}
	for _, line := range []string{"a map step", "one task per element of the flow input"} {
		more = append(more, workertest.StartRun(t, db.Pool, "word_totals", `["`+line+`"]`))
	}
	for _, id := range more {
		if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
			t.Fatalf("example run %s: %s %s", id, r.Status, r.Error)
		}
	}
	// hello's steps retry (max_attempts 3, base_delay 1): the failure takes a few seconds.
	if r := workertest.WaitRun(t, db.Pool, bad, 90*time.Second); r.Status != "failed" {
		t.Fatalf("hello without a name: %s, want failed", r.Status)
	}
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: quietLog(), Actions: true,
		Flows: func() *flowfile.File { return file }, Modules: w.ModuleInfo, PollInterval: 200 * time.Millisecond})
	ctx := tab(t, browser)
	base := strings.TrimSuffix(srv.URL(), "/")

	navigate(t, ctx, base+"/runs")
	waitFor(t, ctx, fmt.Sprintf(`document.querySelector('tr[data-run=%q] .badge')?.textContent === "completed"`, words),
		10*time.Second, "the runs page lists the finished word_totals run as completed")
	if n := eval[int](t, ctx, `document.querySelectorAll('table.runs tbody tr').length`); n != 8 {
		t.Errorf("the runs page lists %d runs, want 8", n)
	}
	screenshot(t, ctx, "runs")

	navigate(t, ctx, base+"/runs/"+words)
	waitFor(t, ctx, `document.querySelectorAll('.graph .node.st-completed').length === 4`, 10*time.Second,
		"the graph of word_totals shows its four steps completed")
	if got := eval[string](t, ctx, `document.querySelector('#step-count .progress-text').textContent`); !strings.Contains(got, "4 of 4") {
		t.Errorf("the map step says %q, want 4 of 4 elements done", got)
	}
	if got := eval[string](t, ctx, `document.querySelector('.io section:nth-child(2) pre').textContent`); !strings.Contains(got, `"sum": 34`) {
		t.Errorf("the run output shows %q, want 34 (both totals of 17 words)", got)
	}
	screenshot(t, ctx, "run")

	navigate(t, ctx, base+"/runs/"+bad)
	waitFor(t, ctx, `[...document.querySelectorAll('.task-error')].some(e => e.offsetParent && e.textContent.includes('input.run.name must be a string'))`,
		10*time.Second, "the failed hello run shows its task's error")
	screenshot(t, ctx, "run-failed")

	navigate(t, ctx, base+"/flows")
	waitFor(t, ctx, fmt.Sprintf(`document.querySelectorAll('section.flow').length === %d`, len(file.Flows)), 10*time.Second,
		"the flows page shows every example flow")
	sha := w.ModuleInfo
	info, _ := sha("word_totals", "count")
	if got := eval[string](t, ctx, `document.querySelector('#flow-word_totals tr[data-step="count"] .hash span').title`); got != info.SHA256 {
		t.Errorf("count's module sha256 on the page %q, want %q", got, info.SHA256)
	}
	if got := eval[string](t, ctx, `document.querySelector('#flow-hello .counts').textContent`); !strings.Contains(got, "4 completed") || !strings.Contains(got, "1 failed") {
		t.Errorf("hello's counts over the last hour: %q", got)
	}
	screenshot(t, ctx, "flows")

	navigate(t, ctx, base+"/workers")
	waitFor(t, ctx, fmt.Sprintf(`document.querySelectorAll('table.workers .badge.st-alive').length === %d`, len(file.Flows)), 10*time.Second,
		"the workers page shows the worker's rows (one per flow) alive")
	screenshot(t, ctx, "workers")
}

const testFlowsYAML = `
flows:
  - slug: echo_out
    steps:
      - {slug: echo, module: {{root}}/modules/testdata/echo.wasm}
  - slug: failing
    max_attempts: 1
    steps:
      - {slug: prepare, module: {{root}}/modules/testdata/echo.wasm}
      - {slug: explode, depends_on: [prepare], module: {{root}}/modules/testdata/fail.wasm}
`

// liveFlowYAML is served only once the page is open. Its map step's elements each busy-loop
// (work reads input.run.iterations, here from the element), one at a time, so the page
// can be seen filling in.
const liveFlowYAML = `
flows:
  - slug: live
    max_concurrency: 1
    steps:
      - {slug: elements, type: map, module: {{root}}/modules/testdata/work.wasm}
      - {slug: total, depends_on: [elements], module: {{root}}/modules/testdata/echo.wasm}
`

func testFlows(t *testing.T, browser context.Context) {
	db := pgtest.NewDB(t)
	workertest.StartWorker(t, db.Pool, workertest.FlowsFile(t, testFlowsYAML, nil), worker.Config{Signal: pgflowtype.SignalNotify})
	liveFile := workertest.FlowsFile(t, liveFlowYAML, nil)
	workertest.Compile(t, db.Pool, liveFile)

	srv := dashtest.Listen(t, "0.0.0.0:0", dashboard.Config{Pool: db.Pool, Log: quietLog(), Token: dashtest.Token,
		PollInterval: 200 * time.Millisecond})
	_, port, _ := net.SplitHostPort(srv.Addr())
	ip := dashtest.NonLoopbackIP()
	ctx := tab(t, browser)

	t.Run("a non-loopback request without the token is refused", func(t *testing.T) {
		if ip == "" {
			t.Skip("this machine has no network interface but loopback: no non-loopback request can be made")
		}
		secret := workertest.StartRun(t, db.Pool, "echo_out", `{"value": "hidden-value-1234"}`)
		workertest.WaitRun(t, db.Pool, secret, 60*time.Second)
		u := "http://" + net.JoinHostPort(ip, port)
		resp := within(t, ctx, 60*time.Second, chromedp.NavigateResponse(u+"/runs/"+secret))
		text := eval[string](t, ctx, `document.body.innerText`)
		if resp.Status != 401 || !strings.Contains(text, "Token needed") || strings.Contains(text, "hidden-value") {
			t.Fatalf("without the token: HTTP %d, page %q", resp.Status, text)
		}
		within(t, ctx, 60*time.Second, chromedp.NavigateResponse(u+"/runs/"+secret+"?token="+url.QueryEscape(dashtest.Token)))
		waitFor(t, ctx, `document.body.innerText.includes('hidden-value-1234')`, 10*time.Second, "with the token the run is shown")
		if loc := eval[string](t, ctx, `location.href`); strings.Contains(loc, "token") {
			t.Errorf("the token stayed in the address bar: %s", loc)
		}
	})
	reach := ip
	if reach == "" {
		reach = "127.0.0.1"
	}
	base := "http://" + net.JoinHostPort(reach, port)
	// Every page from here on is reached through the token's session cookie.
	navigate(t, ctx, base+"/runs?token="+url.QueryEscape(dashtest.Token))

	t.Run("the runs page lists a finished run", func(t *testing.T) {
		id := workertest.StartRun(t, db.Pool, "echo_out", `{"value": {"n": 1}}`)
		workertest.WaitRun(t, db.Pool, id, 60*time.Second)
		navigate(t, ctx, base+"/runs?flow=echo_out&status=completed")
		waitFor(t, ctx, fmt.Sprintf(`document.querySelector('tr[data-run=%q]')?.innerText.includes('completed')`, id),
			10*time.Second, "the finished run is listed as completed")
	})

	t.Run("a failed task's error is visible on its run page", func(t *testing.T) {
		id := workertest.StartRun(t, db.Pool, "failing", `{}`)
		if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "failed" {
			t.Fatalf("run %s: %s", id, r.Status)
		}
		navigate(t, ctx, base+"/runs/"+id)
		waitFor(t, ctx, `(() => { const e = document.querySelector('#step-explode tr[data-status="failed"] .task-error');
			return e && e.offsetParent !== null && e.textContent.includes('always fails'); })()`,
			10*time.Second, "the failed task's error is visible")
		if !eval[bool](t, ctx, `document.querySelector('.banner-failed').textContent.includes('always fails')`) {
			t.Error("the run's error banner does not show the error")
		}
		if !eval[bool](t, ctx, `document.querySelector('.graph .node.st-failed[data-step="explode"]') !== null`) {
			t.Error("the failed step is not red in the graph")
		}
	})

	t.Run("a <script> output is shown as text", func(t *testing.T) {
		payload := `<script>window.owned = 1; document.title = 'owned'</script><img src=x onerror="window.owned = 2">`
		id := workertest.StartRun(t, db.Pool, "echo_out", fmt.Sprintf(`{"value": %q}`, payload))
		workertest.WaitRun(t, db.Pool, id, 60*time.Second)
		navigate(t, ctx, base+"/runs/"+id)
		waitFor(t, ctx, `document.querySelector('.io section:nth-child(2) pre') !== null`, 10*time.Second, "the output is shown")
		out := eval[string](t, ctx, `document.querySelector('.io section:nth-child(2) pre').textContent`)
		if !strings.Contains(out, "<script>window.owned = 1;") || !strings.Contains(out, `onerror=\"window.owned = 2\"`) {
			t.Errorf("the output is not shown as its text: %q", out)
		}
		if owned := eval[bool](t, ctx, `window.owned !== undefined || document.title === 'owned'`); owned {
			t.Fatal("the handler's output ran as script")
		}
		if n := eval[int](t, ctx, `document.querySelectorAll('main script, main img').length`); n != 0 {
			t.Fatalf("the output became %d elements of the page", n)
		}
	})

	t.Run("a running run updates live while its steps complete", func(t *testing.T) {
		// Five elements of work, one at a time, each long enough to be seen (about 0.5 s: the
		// instrumented loop does about two iterations a nanosecond on wazero).
		elements := strings.TrimSuffix(strings.Repeat(`{"run": {"iterations": 1000000000}}, `, 5), ", ")
		id := workertest.StartRun(t, db.Pool, "live", "["+elements+"]")
		navigate(t, ctx, base+"/runs/"+id)
		waitFor(t, ctx, `document.querySelector('h1 .badge')?.textContent === 'started'`, 10*time.Second, "the run shows as started")
		// Record every state the page shows; a reload would lose the recorder.
		eval[bool](t, ctx, `(() => {
			window.seen = [];
			const record = () => window.seen.push({
				run: document.querySelector('h1 .badge').textContent,
				progress: document.querySelector('#step-elements .progress')?.dataset.done + '/' + document.querySelector('#step-elements .progress')?.dataset.total,
				total: document.querySelector('#step-total')?.dataset.status });
			document.addEventListener('pgflow:updated', record);
			record();
			return true; })()`)
		start := time.Now()
		workertest.StartWorker(t, db.Pool, liveFile, worker.Config{Signal: pgflowtype.SignalNotify})
		shot := false
		deadline := time.Now().Add(120 * time.Second)
		for {
			done := eval[string](t, ctx, `document.querySelector('#step-elements .progress')?.dataset.done || ''`)
			if !shot && done != "" && done != "0" && done != "5" {
				screenshot(t, ctx, "run-live")
				shot = true
			}
			if eval[string](t, ctx, `document.querySelector('h1 .badge').textContent`) == "completed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page did not show the run completed within 120 s; it shows:\n%s", eval[string](t, ctx, `document.body.innerText`))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("run completed on the page %s after the worker started", time.Since(start).Round(time.Millisecond))
		seen := eval[[]map[string]string](t, ctx, `window.seen || []`)
		if len(seen) < 2 {
			t.Fatalf("the page was reloaded or never updated: states seen %v", seen)
		}
		filling := false
		for _, s := range seen {
			if s["run"] == "started" && s["progress"] != "0/5" && s["progress"] != "5/5" {
				filling = true
			}
		}
		if !filling {
			t.Errorf("the map step was never seen filling in (states: %v)", seen)
		}
		last := seen[len(seen)-1]
		if last["run"] != "completed" || last["total"] != "completed" || last["progress"] != "5/5" {
			t.Errorf("last state %v, want the run and both steps completed", last)
		}
		t.Logf("%d states seen without a reload: %v", len(seen), seen)
	})
}
