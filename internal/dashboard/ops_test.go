package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/dashtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// startWithID starts a run of flow with a chosen id, through pgflow's own start_flow.
func startWithID(t *testing.T, db *pgtest.DB, flow, id string) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `select pgflow.start_flow(flow_slug => $1, input => '{}'::jsonb, run_id => $2::uuid)`, flow, id); err != nil {
		t.Fatal(err)
	}
}

// The header's search box: an 8-character prefix of one run's id opens that run's page, one
// that begins several ids lists them, and text that is no run id says why.
func TestSearchFindsRunsByTheirIdsBeginning(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	one := "5ea2c41d-7a2e-4f11-9c3b-0d1e2f3a4b5c"
	twins := []string{"77aa77aa-0000-4000-8000-000000000001", "77aa77aa-0000-4000-8000-000000000002"}
	for _, id := range append([]string{one}, twins...) {
		startWithID(t, db, "echo", id)
	}
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	base := strings.TrimSuffix(srv.URL(), "/")

	if _, body := get(t, base+"/runs", nil); !strings.Contains(body, `<form class="search" method="get" action="/search"`) {
		t.Errorf("the runs page has no search box:\n%s", body)
	}
	resp, _ := get(t, base+"/search?q="+one[:8], nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runs/"+one {
		t.Errorf("one run found by %s: HTTP %d to %q, want 303 to its page", one[:8], resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := get(t, base+"/search?q=77AA77AA", nil)
	if resp.StatusCode != http.StatusOK || strings.Count(body, "<tr data-run=") != 2 ||
		!strings.Contains(body, `data-run="`+twins[0]+`"`) || !strings.Contains(body, `data-run="`+twins[1]+`"`) ||
		!strings.Contains(body, "begins with") {
		t.Errorf("two runs found by 77AA77AA: HTTP %d, want both listed:\n%s", resp.StatusCode, body)
	}
	if _, body := get(t, base+"/search?q=0d1e2f3a", nil); !strings.Contains(body, "/runs/"+one) {
		// no id begins with it: the 2nd search, ids that contain it, finds one run
		t.Errorf("a part from the middle of an id did not lead to its run")
	}
	for q, want := range map[string]string{
		"abc":          "at least 4 characters",
		"not a run id": "is not part of a run id",
		"deadbeef":     "No run's id begins with or contains deadbeef",
	} {
		resp, body := get(t, base+"/search?q="+strings.ReplaceAll(q, " ", "+"), nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("search %q: HTTP %d, want a page saying %q:\n%s", q, resp.StatusCode, want, body)
		}
	}
}

// The header's search box finds runs by a field of their input: the exact value, newest
// first, never redirecting (a field is no id); a text that is no input query says how to
// write one.
func TestSearchFindsRunsByAnInputField(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	ids := map[string]string{}
	for _, in := range []string{`{"customer": "cus_42"}`, `{"customer": "cus_4"}`, `{"customer": "cus_42", "vip": true}`} {
		var id string
		if err := db.Pool.QueryRow(context.Background(), `select run_id::text from pgflow.start_flow('echo', $1::jsonb)`, in).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[in] = id
	}
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	search := func(q string) (int, string) {
		t.Helper()
		resp, body := get(t, strings.TrimSuffix(srv.URL(), "/")+"/search?q="+url.QueryEscape(q), nil)
		return resp.StatusCode, body
	}
	code, body := search("input.customer = cus_42")
	if code != http.StatusOK || strings.Count(body, "<tr data-run=") != 2 || !strings.Contains(body, `data-run="`+ids[`{"customer": "cus_42"}`]+`"`) ||
		!strings.Contains(body, `data-run="`+ids[`{"customer": "cus_42", "vip": true}`]+`"`) || !strings.Contains(body, "whose input contains") {
		t.Errorf("input.customer = cus_42: HTTP %d, want the two runs of cus_42 listed:\n%s", code, body)
	}
	if code, body := search("input.customer = cus_42 and input.vip = true"); code != http.StatusOK || strings.Count(body, "<tr data-run=") != 1 {
		t.Errorf("two fields: HTTP %d, want one run listed:\n%s", code, body)
	}
	if code, body := search("input.customer = nobody"); code != http.StatusOK || !strings.Contains(body, "No run's input contains") {
		t.Errorf("no match: HTTP %d:\n%s", code, body)
	}
	if code, body := search("input.customer"); code != http.StatusOK || !strings.Contains(body, "is not input.FIELD = VALUE") {
		t.Errorf("a bad query: HTTP %d:\n%s", code, body)
	}
}

// The stats page of a flow with 1,000 runs over the last day: each window's numbers are
// those counted in Go from the runs, and each of its four charts has a bar per bucket whose
// values add up to them.
func TestStatsChartAThousandRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	runs, now := dashtest.StartStatsRuns(t, db, 1000)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	resp, body := get(t, strings.TrimSuffix(srv.URL(), "/")+"/stats", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/stats: HTTP %d\n%s", resp.StatusCode, body)
	}
	attr := func(html, name string) int {
		t.Helper()
		m := regexp.MustCompile(` ` + name + `="(-?\d+)"`).FindStringSubmatch(html)
		if m == nil {
			t.Fatalf("no %s in %s", name, html)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	for _, w := range []struct {
		name    string
		span    time.Duration
		buckets int
	}{{"hour", time.Hour, 12}, {"day", 24 * time.Hour, 24}} {
		want := dashtest.WantStats(runs, now, w.span)
		row := regexp.MustCompile(`(?s)<tr data-window="` + w.name + `">.*?</tr>`).FindString(body)
		got := dashtest.StatsWant{Started: attr(row, "data-started"), Completed: attr(row, "data-completed"), Failed: attr(row, "data-failed"),
			P50: time.Duration(attr(row, "data-p50-ms")) * time.Millisecond, P95: time.Duration(attr(row, "data-p95-ms")) * time.Millisecond}
		if got.Started != want.Started || got.Completed != want.Completed || got.Failed != want.Failed ||
			(got.P50-want.P50.Truncate(time.Millisecond)).Abs() > time.Millisecond || (got.P95-want.P95.Truncate(time.Millisecond)).Abs() > time.Millisecond {
			t.Errorf("last %s: the page says %+v, want %+v", w.name, got, want)
		}
		charts := regexp.MustCompile(`(?s)<div class="charts" data-window="` + w.name + `">.*?</div>`).FindString(body)
		for chart, total := range map[string]int{"started": want.Started, "completed": want.Completed, "failed": want.Failed, "duration": -1} {
			svg := regexp.MustCompile(`(?s)<svg class="chart chart-` + chart + `".*?</svg>`).FindString(charts)
			bars := regexp.MustCompile(`<rect class="bar" data-value="(\d+)" x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)"`).FindAllStringSubmatch(svg, -1)
			if len(bars) != w.buckets {
				t.Errorf("last %s, %s: %d bars, want %d:\n%s", w.name, chart, len(bars), w.buckets, svg)
				continue
			}
			sum, drawn := 0, false
			for _, b := range bars {
				n, _ := strconv.Atoi(b[1])
				sum += n
				drawn = drawn || b[2] != "0.0"
			}
			if total >= 0 && sum != total {
				t.Errorf("last %s, %s: the bars add up to %d, want %d", w.name, chart, sum, total)
			}
			if total != 0 && !drawn {
				t.Errorf("last %s, %s: every bar is flat:\n%s", w.name, chart, svg)
			}
		}
	}
	queue := regexp.MustCompile(`<span class="queue" data-queue="busy"[^>]*>`).FindString(body)
	if queue == "" || attr(queue, "data-visible") != 100 || attr(queue, "data-total") != 100 {
		t.Errorf("busy's queue: %q, want the 100 runs' messages no worker read", queue)
	}
}

// 61 failed tasks of three underlying causes, every message different (ids, times, uuids,
// quoted values, numbers, hex, second lines), show as three groups of 30, 20 and 11, each
// with its shape, the flows and steps it hit, first and last seen, a sparkline, and a link
// to its latest failure.
func TestSixtyOneFailuresOfThreeCausesAreThreeGroups(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	causes := dashtest.StartShapedFailures(t, db)
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	resp, body := get(t, strings.TrimSuffix(srv.URL(), "/")+"/failures", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/failures: HTTP %d\n%s", resp.StatusCode, body)
	}
	rows := regexp.MustCompile(`(?s)<tr data-shape="([^"]*)" data-steps="([^"]*)" data-tasks="(\d+)" data-runs="(\d+)">(.*?)</tr>`).FindAllStringSubmatch(body, -1)
	if len(rows) != len(causes) {
		t.Fatalf("%d groups, want %d:\n%s", len(rows), len(causes), body)
	}
	for i, c := range causes {
		r := rows[i]
		shape := html.UnescapeString(r[1])
		if shape != c.Shape || r[2] != strings.Join(c.Steps, " ") || r[3] != strconv.Itoa(c.Tasks) || r[4] != strconv.Itoa(c.Tasks) {
			t.Errorf("group %d: shape %q, steps %q, %s tasks of %s runs; want %q, %q, %d of %d", i, shape, r[2], r[3], r[4],
				c.Shape, strings.Join(c.Steps, " "), c.Tasks, c.Tasks)
		}
		if n := strings.Count(r[5], "<rect "); n < 1 {
			t.Errorf("group %d has no sparkline bar", i)
		}
		if strings.Count(r[5], "<time ") != 2 {
			t.Errorf("group %d does not show first and last seen: %s", i, r[5])
		}
	}
	var latest string
	if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.step_tasks where flow_slug = 'invoices' order by failed_at desc limit 1`).Scan(&latest); err != nil {
		t.Fatal(err)
	}
	if want := `class="latest" href="/runs/` + latest + `?from=0&amp;step=decode#task-decode-0"`; !strings.Contains(rows[2][5], want) {
		t.Errorf("the third group links to %q, want its latest failure: %s", rows[2][5], want)
	}
	if !strings.Contains(rows[1][5], "latest: HTTP 503 from http://tax:8019/v2/rates") {
		t.Errorf("the second group does not show its latest error as it was: %s", rows[1][5])
	}
	if _, body := get(t, strings.TrimSuffix(srv.URL(), "/")+"/failures?window=hour", nil); !strings.Contains(body, "last hour") || strings.Count(body, "<tr data-shape=") != 3 {
		t.Errorf("the last hour's failures: %s", body)
	}
	if strings.Contains(body, "failures-capped") {
		t.Errorf("61 failures under the cap are said to be capped")
	}
	// A burst over the cap: the newest are grouped (the 11 invoices failed last), and the
	// page says how many failed in all.
	capped := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, MaxShapedFailures: 11})
	_, body = get(t, strings.TrimSuffix(capped.URL(), "/")+"/failures", nil)
	if !strings.Contains(body, "61 tasks failed in the last day: the groups are of the newest 11.") ||
		strings.Count(body, "<tr data-shape=") != 1 || !strings.Contains(body, `data-steps="invoices/decode" data-tasks="11"`) {
		t.Errorf("capped at 11: %s", body)
	}
}

// The shapes errors are grouped by: what varies between failures of one cause goes, what
// tells causes apart stays.
func TestErrorShapesTakeOutWhatVaries(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for in, want := range map[string]string{
		`run 7c9e6679-7425-40de-944b-e07fc1f90ae7 failed`:       `run <uuid> failed`,
		`at 2026-11-28T11:12:07.123+01:00 and 2026-11-28 11:12`: `at <time> and <time>`,
		`key "cus_42" and 'x y' missing`:                        `key "…" and '…' missing`,
		`object 3f2a9c1bd0, deadbeefba and 0xFF, not defaced`:   `object <hex>, <hex> and <hex>, not defaced`,
		`order 12345678 and 17`:                                 `order <n> and <n>`,
		`took 1.25s for 3 of 40 items (cus_42, step2)`:          `took <n>s for <n> of <n> items (cus_<n>, step<n>)`,
		`connection refused`:                                    `connection refused`,
		`quoted "with \" escape" ends`:                          `quoted "…" ends`,
	} {
		var got string
		if err := db.Pool.QueryRow(context.Background(), `select `+store.ErrorShapeSQL(`$1::text`), in).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("shape of %q = %q, want %q", in, got, want)
		}
	}
}

// A flow scheduled every second in Berlin's time zone, served by a real worker until its
// schedule started a run: the flows page shows the cron, the zone, the next tick and the
// last one with its run, in the schedule's zone; a flow without a schedule shows none.
func TestTheFlowsPageShowsSchedules(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	file := workertest.FlowsFile(t, `
flows:
  - slug: ticking
    schedule:
      cron: "* * * * * *"
      timezone: Europe/Berlin
    steps:
      - {slug: s, module: {{root}}/modules/testdata/echo.wasm}
  - slug: plain
    steps:
      - {slug: s, module: {{root}}/modules/testdata/echo.wasm}
`, nil)
	w := workertest.StartWorker(t, db.Pool, file, worker.Config{})
	var tick time.Time
	var run string
	for deadline := time.Now().Add(60 * time.Second); run == ""; time.Sleep(100 * time.Millisecond) {
		err := db.Pool.QueryRow(ctx, `select tick, run_id::text from pgflow_wasm.schedule_ticks where flow_slug = 'ticking' order by tick desc limit 1`).Scan(&tick, &run)
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("no tick recorded: %v", err)
		}
	}
	if err := w.Stop(t); err != nil { // no more ticks: the last one stays the last
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `select tick, run_id::text from pgflow_wasm.schedule_ticks where flow_slug = 'ticking' order by tick desc limit 1`).Scan(&tick, &run); err != nil {
		t.Fatal(err)
	}
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Flows: func() *flowfile.File { return file }})
	_, body := get(t, strings.TrimSuffix(srv.URL(), "/")+"/flows", nil)
	section := regexp.MustCompile(`(?s)<section class="card flow" id="flow-ticking">.*?</section>`).FindString(body)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, want := range []string{
		`<p class="schedule" data-cron="* * * * * *" data-zone="Europe/Berlin">`,
		`<code>* * * * * * (Europe/Berlin)</code>`,
		`data-last>` + tick.In(berlin).Format("2006-01-02 15:04:05 MST") + `</time>`,
		`<a class="last-run" href="/runs/` + run + `"`,
	} {
		if !strings.Contains(section, want) {
			t.Errorf("ticking's card lacks %s:\n%s", want, section)
		}
	}
	next := regexp.MustCompile(`<time datetime="([^"]+)" data-next>`).FindStringSubmatch(section)
	if next == nil {
		t.Fatalf("no next tick:\n%s", section)
	}
	if at, err := time.Parse(time.RFC3339Nano, next[1]); err != nil || !at.After(tick) {
		t.Errorf("next tick %s, want one after the last, %s (%v)", next[1], tick, err)
	}
	plain := regexp.MustCompile(`(?s)<section class="card flow" id="flow-plain">.*?</section>`).FindString(body)
	if plain == "" || strings.Contains(plain, `class="schedule"`) {
		t.Errorf("plain's card: %s", plain)
	}
}

// A task that failed twice before it completed: its row names both failed attempts, each
// with its worker and error (pgflow's row keeps only the last error).
func TestATaskRowShowsItsEarlierAttempts(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	w := workertest.StartWorker(t, db.Pool, workertest.FlowsFile(t, `
flows:
  - slug: flaky
    max_attempts: 3
    base_delay: 0
    steps:
      - {slug: f, module: {{root}}/modules/testdata/flaky.wasm}
`, nil), worker.Config{})
	id := workertest.StartRun(t, db.Pool, "flaky", `{"succeed_on": 3}`)
	if r := workertest.WaitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
		t.Fatalf("run: %s %s", r.Status, r.Error)
	}
	srv := dashtest.Listen(t, "127.0.0.1:0", dashboard.Config{Pool: db.Pool})
	_, body := get(t, strings.TrimSuffix(srv.URL(), "/")+"/runs/"+id, nil)
	row := regexp.MustCompile(`(?s)<tr id="task-f-0".*?</tr>`).FindString(body)
	attempts := regexp.MustCompile(`(?s)<li data-attempt="(\d+)">(.*?)</li>`).FindAllStringSubmatch(row, -1)
	if len(attempts) != 2 {
		t.Fatalf("%d earlier attempts in the task's row, want 2:\n%s", len(attempts), row)
	}
	workerID := w.WorkerIDs()["flaky"]
	for i, a := range attempts {
		n := strconv.Itoa(i + 1)
		if a[1] != n || !strings.Contains(a[2], "attempt "+n+" · worker") || !strings.Contains(a[2], `title="`+workerID+`">`+workerID[:8]+`</a>`) ||
			!strings.Contains(a[2], "attempt "+n+" failed") {
			t.Errorf("earlier attempt %s: %s", n, a[2])
		}
	}
	if strings.Contains(row, "earlier attempt:") {
		t.Errorf("the last failed attempt's error is shown twice:\n%s", row)
	}
}
