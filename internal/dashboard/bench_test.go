package dashboard_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// benchRuns is how many runs the runs page is measured against.
const benchRuns = 100_000

// seedRuns writes n runs of three flows into pgflow.runs as pgflow leaves them: 90%
// completed with an output, 7% failed (with the failed step's error in step_states), 3%
// still started; one run every 26 s, so they span 30 days. Rows are written with one
// INSERT ... SELECT (starting 100,000 runs through pgflow.start_flow takes minutes and
// gives the runs table the same shape), then the table is vacuumed and analyzed.
func seedRuns(b *testing.B, db *pgtest.DB, n int) {
	b.Helper()
	ctx := context.Background()
	workertest.Compile(b, db.Pool, workertest.FlowsFile(b, `
flows:
  - {slug: orders, steps: [{slug: check, module: "{{root}}/modules/testdata/echo.wasm"}]}
  - {slug: emails, steps: [{slug: send, module: "{{root}}/modules/testdata/echo.wasm"}]}
  - {slug: reports, steps: [{slug: build, module: "{{root}}/modules/testdata/echo.wasm"}]}
`, nil))
	start := time.Now()
	for _, step := range []struct {
		sql  string
		args []any
	}{
		{`insert into pgflow.runs (run_id, flow_slug, status, input, output, remaining_steps, started_at, completed_at, failed_at)
		 select gen_random_uuid(), (array['orders', 'emails', 'reports'])[1 + g % 3], s,
		        jsonb_build_object('id', g, 'customer', 'customer ' || (g % 977), 'items', jsonb_build_array(g % 7, g % 11)),
		        case when s = 'completed' then jsonb_build_object('check', jsonb_build_object('ok', true, 'total', g % 1000)) end,
		        case when s = 'started' then 1 else 0 end, t,
		        case when s = 'completed' then t + (g % 5000) * interval '1 ms' end,
		        case when s = 'failed' then t + (g % 5000) * interval '1 ms' end
		 from (select g, clock_timestamp() - g * interval '26 seconds' as t,
		              case when g % 100 < 90 then 'completed' when g % 100 < 97 then 'failed' else 'started' end as s
		       from generate_series(1, $1::int) g) x`, []any{n}},
		{`insert into pgflow.step_states (flow_slug, run_id, step_slug, status, remaining_tasks, created_at, started_at, failed_at, error_message)
		 select r.flow_slug, r.run_id, s.step_slug, 'failed', 1, r.started_at, r.started_at, r.failed_at,
		        'handler_error: upstream answered 503 for request ' || left(r.run_id::text, 8)
		 from pgflow.runs r join pgflow.steps s on s.flow_slug = r.flow_slug where r.status = 'failed'`, nil},
		{`vacuum analyze pgflow.runs`, nil},
		{`vacuum analyze pgflow.step_states`, nil},
	} {
		if _, err := db.Pool.Exec(ctx, step.sql, step.args...); err != nil {
			b.Fatalf("seeding: %v", err)
		}
	}
	b.Logf("seeded %d runs in %s", n, time.Since(start).Round(time.Millisecond))
}

// BenchmarkRunsPage renders the runs page (HTTP request to the last byte of HTML) with
// 100,000 runs in the database, first with pgflow's own indexes only, then with the index
// `db install` and the dashboard's start create (schema.RunsIndex):
// `go test ./dashboard -run '^$' -bench RunsPage -benchtime 50x`. docs/benchmarks-history.md has the figures.
func BenchmarkRunsPage(b *testing.B) {
	db := pgtest.NewDB(b)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, "drop index pgflow."+schema.RunsIndex); err != nil {
		b.Fatal(err)
	}
	seedRuns(b, db, benchRuns)
	srv, err := dashboard.Listen(ctx, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: slog.New(slog.DiscardHandler), NoRunsIndex: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())

	// A cursor half-way down: the 50,000th run.
	var mid store.Cursor
	if err := db.Pool.QueryRow(context.Background(), `select started_at, run_id::text from pgflow.runs
		order by started_at desc, run_id desc offset $1 limit 1`, benchRuns/2).Scan(&mid.StartedAt, &mid.RunID); err != nil {
		b.Fatal(err)
	}
	pages := []struct{ name, query string }{
		{"newest", ""},
		{"flow", "flow=emails"},
		{"status_failed", "status=failed"},
		{"page_50000", "before=" + url.QueryEscape(mid.String())},
	}
	measure := func(b *testing.B, query string) {
		u := srv.URL() + "runs"
		if query != "" {
			u += "?" + query
		}
		for b.Loop() {
			resp, err := http.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || n < 10_000 {
				b.Fatalf("GET %s: %d, %d bytes", u, resp.StatusCode, n)
			}
		}
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) { measure(b, p.query) })
	}
	// pgflow's indexes do not cover started_at: every page sorts the matching runs. With
	// pgflow-wasm's, a page reads only its 51 rows.
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	state, err := schema.EnsureRunsIndex(ctx, conn.Conn())
	conn.Release()
	if err != nil || state != schema.RunsIndexCreated {
		b.Fatalf("creating the runs index: %s %v", state, err)
	}
	b.Logf("created the runs index on %d runs in %s", benchRuns, time.Since(start).Round(time.Millisecond))
	for _, p := range pages {
		b.Run("indexed_"+p.name, func(b *testing.B) { measure(b, p.query) })
	}
}

// BenchmarkInputSearch measures the search by input field with 100,000 runs, without and
// with schema.InputIndex: the search page for a field 102 runs share (`input.customer =
// customer 42`) and for one run's (`input.id = 4242`), and what the index costs each run
// started (pgflow.start_flow) and in space:
// `go test ./internal/dashboard -run '^$' -bench InputSearch -benchtime 50x`.
func BenchmarkInputSearch(b *testing.B) {
	db := pgtest.NewDB(b)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, "drop index pgflow."+schema.InputIndex); err != nil {
		b.Fatal(err)
	}
	seedRuns(b, db, benchRuns)
	srv, err := dashboard.Listen(ctx, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())
	searches := []struct{ name, q string }{{"shared_field", "input.customer = customer 42"}, {"one_run", "input.id = 4242"}}
	measure := func(b *testing.B, q string) {
		u := srv.URL() + "search?q=" + url.QueryEscape(q)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for b.Loop() {
			resp, err := client.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("GET %s: %d", u, resp.StatusCode)
			}
		}
	}
	start := func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('orders', jsonb_build_object('id', $1::int, 'customer', 'customer ' || $1::int % 977,
				'items', jsonb_build_array($1::int % 7, $1::int % 11)))`, benchRuns+i); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, s := range searches {
		b.Run(s.name, func(b *testing.B) { measure(b, s.q) })
	}
	b.Run("start_flow", start)
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	state, err := schema.EnsureInputIndex(ctx, conn.Conn())
	conn.Release()
	if err != nil || state != schema.RunsIndexCreated {
		b.Fatalf("creating the input index: %s %v", state, err)
	}
	var index, table string
	if err := db.Pool.QueryRow(ctx, `select pg_size_pretty(pg_relation_size('pgflow.`+schema.InputIndex+`')),
		pg_size_pretty(pg_table_size('pgflow.runs'))`).Scan(&index, &table); err != nil {
		b.Fatal(err)
	}
	b.Logf("created the input index on %d runs in %s: %s (pgflow.runs: %s)", benchRuns, time.Since(began).Round(time.Millisecond), index, table)
	for _, s := range searches {
		b.Run("indexed_"+s.name, func(b *testing.B) { measure(b, s.q) })
	}
	b.Run("indexed_start_flow", start)
}

// BenchmarkFailuresPage renders the failures page over the last 7 days with 100,000 runs of
// which 7,000 failed, their errors of three causes with ids, numbers and times in them: every
// failed task of the window is shaped (seven regexp_replace) and grouped.
// `go test -tags wasmtime ./internal/dashboard -run '^$' -bench FailuresPage -benchtime 20x -v`.
func BenchmarkFailuresPage(b *testing.B) {
	db := pgtest.NewDB(b)
	ctx := context.Background()
	seedRuns(b, db, benchRuns)
	var failed int
	if err := db.Pool.QueryRow(ctx, `with f as (
		  update pgflow.runs r set started_at = x.t - interval '1 second', failed_at = x.t
		  from (select run_id, now() - (random() * 6.9) * interval '1 day' as t from pgflow.runs where status = 'failed') x
		  where r.run_id = x.run_id returning r.run_id, r.flow_slug, r.failed_at)
		insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, status, attempts_count, error_message, queued_at, started_at, failed_at)
		select f.flow_slug, f.run_id, s.step_slug, 0, 'failed', 1,
		       case row_number() over () % 3
		         when 0 then 'customer cus_' || (random() * 100000)::int || ' not found at ' || f.failed_at || ' (request ' || gen_random_uuid() || ')'
		         when 1 then 'HTTP 503 from http://tax:' || (8000 + (random() * 100)::int) || '/v2/rates after ' || round(random()::numeric * 5, 3) || 's'
		         else 'decoding invoice ' || md5(f.run_id::text) || ': unexpected byte 0x' || to_hex((random() * 255)::int) end,
		       f.failed_at - interval '1 second', f.failed_at - interval '1 second', f.failed_at
		from f join pgflow.steps s on s.flow_slug = f.flow_slug`).Scan(&failed); err != nil && err.Error() != "no rows in result set" {
		b.Fatalf("seeding failed tasks: %v", err)
	}
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where status = 'failed'`).Scan(&failed); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `vacuum analyze pgflow.step_tasks`); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d failed tasks over the last 7 days", failed)
	srv, err := dashboard.Listen(ctx, "127.0.0.1:0", dashboard.Config{Pool: db.Pool, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())
	for _, window := range []string{"day", "week"} {
		b.Run(window, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(srv.URL() + "failures?window=" + window)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || strings.Count(string(body), "<tr data-shape=") != 3 {
					b.Fatalf("GET /failures?window=%s: %d, %d groups", window, resp.StatusCode, strings.Count(string(body), "<tr data-shape="))
				}
			}
		})
	}
}
