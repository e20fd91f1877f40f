package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// MinSearch is the fewest hex digits SearchRuns looks for.
const MinSearch = 4

// ErrBadSearch is SearchRuns refusing its text: not part of a run id, or too short.
var ErrBadSearch = errors.New("not a run id search")

// SearchResult is what SearchRuns found: runs whose id begins with the text (Prefix) or,
// when none does, contains it.
type SearchResult struct {
	Runs   []pgflowtype.Run // newest first
	More   bool             // more runs match than were read
	Prefix bool             // the runs' ids begin with the text (else they contain it)
	Now    time.Time
}

// runIDBounds turns the beginning of a run id as typed (any case, with or without its
// hyphens) into the lowest and highest uuids that begin with it: a uuid's order is its
// bytes' order, which is its hex text's order, so the runs whose id begins with it are a
// range of pgflow's primary key.
func runIDBounds(q string) (hex, lo, hi string, ok bool) {
	hex = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(q), "-", ""))
	if len(hex) == 0 || len(hex) > 32 {
		return "", "", "", false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", "", "", false
		}
	}
	lo, _ = ParseID(hex + strings.Repeat("0", 32-len(hex)))
	hi, _ = ParseID(hex + strings.Repeat("f", 32-len(hex)))
	return hex, lo, hi, true
}

// SearchRuns finds runs by their id or part of it: the runs whose id begins with q (a range
// scan of pgflow's primary key on runs.run_id) or, when none does, whose id contains it
// (a scan of every run id). At most limit runs are read.
func (s *Store) SearchRuns(ctx context.Context, q string, limit int) (SearchResult, error) {
	hex, lo, hi, ok := runIDBounds(q)
	if !ok {
		return SearchResult{}, fmt.Errorf("%w: %q is not part of a run id (run ids are uuids such as 0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b)", ErrBadSearch, q)
	}
	if len(hex) < MinSearch {
		return SearchResult{}, fmt.Errorf("%w: type at least %d characters of the run id", ErrBadSearch, MinSearch)
	}
	now, err := s.Now(ctx)
	if err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{Now: now, Prefix: true}
	read := func(cond string, args ...any) error {
		rows, err := s.pool.Query(ctx, `select `+runCols(300, "")+` from pgflow.runs r where `+cond+
			fmt.Sprintf(` limit %d`, limit+1), args...)
		if err != nil {
			return err
		}
		res.Runs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (pgflowtype.Run, error) {
			var r pgflowtype.Run
			err := scanRun(row, &r)
			return r, err
		})
		return err
	}
	if err := read(`r.run_id between $1::uuid and $2::uuid order by r.run_id`, lo, hi); err != nil {
		return res, err
	}
	if len(res.Runs) == 0 && len(hex) < 32 {
		res.Prefix = false
		if err := read(`replace(r.run_id::text, '-', '') like '%' || $1 || '%' order by r.started_at desc`, hex); err != nil {
			return res, err
		}
	}
	if len(res.Runs) > limit {
		res.Runs, res.More = res.Runs[:limit], true
	}
	slices.SortStableFunc(res.Runs, func(a, b pgflowtype.Run) int { return b.StartedAt.Compare(a.StartedAt) })
	return res, nil
}

// StatsWindow is a period the flows' statistics cover, cut into buckets for a chart.
type StatsWindow struct {
	Name    string // "hour", "day"
	Span    time.Duration
	Buckets int
}

// StatsWindows are the periods FlowStats covers: the last hour in 5-minute buckets, the
// last day in hours.
var StatsWindows = []StatsWindow{{"hour", time.Hour, 12}, {"day", 24 * time.Hour, 24}}

// RunStats counts runs started in a period: how many, how many of them completed, failed,
// or still run, and the median and 95th percentile of the completed ones' durations.
type RunStats struct {
	Started, Completed, Failed, Running int
	P50, P95                            time.Duration // 0 when none completed
	Start                               time.Time     // a bucket's start
}

// WindowStats are one flow's runs over one window: all of it, and bucket by bucket (oldest
// first).
type WindowStats struct {
	Window  StatsWindow
	Total   RunStats
	Buckets []RunStats
}

// FlowStats reads, per flow, the runs started over each of StatsWindows (by started_at,
// through schema.RunsIndex): totals and buckets. Flows without runs have empty buckets.
func (s *Store) FlowStats(ctx context.Context) (map[string][]WindowStats, time.Time, error) {
	out := map[string][]WindowStats{}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&now); err != nil {
		return nil, now, err
	}
	for wi, w := range StatsWindows {
		bucket := w.Span / time.Duration(w.Buckets)
		rows, err := s.pool.Query(ctx, `
			select flow_slug, coalesce(b, -1), count(*),
			       count(*) filter (where status = 'completed'), count(*) filter (where status = 'failed'),
			       coalesce(percentile_cont(0.5) within group (order by secs) filter (where status = 'completed'), 0),
			       coalesce(percentile_cont(0.95) within group (order by secs) filter (where status = 'completed'), 0)
			from (select r.flow_slug, r.status, extract(epoch from r.completed_at - r.started_at) as secs,
			             least(greatest(floor(extract(epoch from $1::timestamptz - r.started_at) / $3)::int, 0), $4 - 1) as b
			      from pgflow.runs r
			      where r.started_at > $1::timestamptz - $2 * interval '1 second') x
			group by grouping sets ((flow_slug), (flow_slug, b))`,
			now, w.Span.Seconds(), bucket.Seconds(), w.Buckets)
		if err != nil {
			return nil, now, err
		}
		for rows.Next() {
			var flow string
			var b int
			var st RunStats
			var p50, p95 float64
			if err := rows.Scan(&flow, &b, &st.Started, &st.Completed, &st.Failed, &p50, &p95); err != nil {
				rows.Close()
				return nil, now, err
			}
			st.Running = st.Started - st.Completed - st.Failed
			st.P50, st.P95 = seconds(p50), seconds(p95)
			ws := out[flow]
			if ws == nil {
				ws = emptyStats(now)
				out[flow] = ws
			}
			if b < 0 {
				ws[wi].Total = st
			} else {
				// b counts back from now: bucket 0 is the newest; the chart runs oldest first.
				i := w.Buckets - 1 - b
				st.Start = ws[wi].Buckets[i].Start
				ws[wi].Buckets[i] = st
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, now, err
		}
	}
	return out, now, nil
}

// EmptyStats are the windows of a flow without runs, measured back from now.
func EmptyStats(now time.Time) []WindowStats { return emptyStats(now) }

func emptyStats(now time.Time) []WindowStats {
	ws := make([]WindowStats, len(StatsWindows))
	for i, w := range StatsWindows {
		bucket := w.Span / time.Duration(w.Buckets)
		ws[i] = WindowStats{Window: w, Buckets: make([]RunStats, w.Buckets)}
		for k := range ws[i].Buckets {
			ws[i].Buckets[k].Start = now.Add(-time.Duration(w.Buckets-k) * bucket)
		}
	}
	return ws
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Queue is one pgmq queue of a flow: how many messages it holds, how many of them a worker
// could read now (the others are being worked on or wait for a retry's delay), and how long
// the oldest of those has waited.
type Queue struct {
	Flow, Name string
	Missing    bool // the flow has no such queue table (pgmq.q_<name>)
	Visible    int
	Total      int
	Oldest     time.Duration // the oldest visible message's age, 0 when none is visible
}

// Queues reads the queues the steps of every flow send to (schema.Protocol.StepQueue: a flow
// with per-step queues has several). Each is a count over its pgmq.q_<name> table.
func (s *Store) Queues(ctx context.Context) ([]Queue, error) {
	rows, err := s.pool.Query(ctx, `select distinct s.flow_slug, `+s.proto.StepQueue("s")+` from pgflow.steps s order by 1, 2`)
	if err != nil {
		return nil, err
	}
	queues, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Queue, error) {
		var q Queue
		err := row.Scan(&q.Flow, &q.Name)
		return q, err
	})
	if err != nil || len(queues) == 0 {
		return queues, err
	}
	tables := make([]string, len(queues))
	for i, q := range queues {
		tables[i] = schema.QueueTableName(q.Name)
	}
	var exists []bool
	if err := s.pool.QueryRow(ctx, `select array_agg(to_regclass(format('pgmq.%I', n)) is not null order by o)
		from unnest($1::text[]) with ordinality u(n, o)`, tables).Scan(&exists); err != nil {
		return nil, err
	}
	var parts []string
	for i, q := range queues {
		if !exists[i] {
			queues[i].Missing = true
			continue
		}
		// The same columns on our pgmq layer and the real pgmq (schema/sql/pgmq_layer.sql).
		parts = append(parts, fmt.Sprintf(`select %d, count(*) filter (where vt <= clock_timestamp()), count(*),
			coalesce(extract(epoch from clock_timestamp() - min(enqueued_at) filter (where vt <= clock_timestamp())), 0) from %s`,
			i, schema.QueueTable(q.Name)))
	}
	if len(parts) == 0 {
		return queues, nil
	}
	rows, err = s.pool.Query(ctx, strings.Join(parts, " union all "))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var i, visible, total int
		var oldest float64
		if err := rows.Scan(&i, &visible, &total, &oldest); err != nil {
			return nil, err
		}
		queues[i].Visible, queues[i].Total, queues[i].Oldest = visible, total, seconds(oldest)
	}
	return queues, rows.Err()
}

// FailureGroup is the failed tasks whose errors have one shape: the first line of the error
// with its variable parts (times, uuids, quoted values, hex ids, numbers) replaced
// (ErrorShapeSQL), whichever flow and step they failed in.
type FailureGroup struct {
	Shape       string   // the normalised first line
	Example     string   // the latest failure's first line as it was, cut to 300 characters
	Steps       []string // "flow/step" of every step that failed so, sorted
	Tasks       int      // failed tasks
	Runs        int      // runs they belong to
	First, Last time.Time
	LastRun     string // the run of the latest of them
	LastStep    string // and its step
	LastIndex   int    // and task index
	Buckets     []int  // failures in each of FailureBuckets equal spans of the window, oldest first
}

// FailureBuckets is how many spans the window of Failures is cut into for the sparkline.
const FailureBuckets = 24

// errorShapeRules are the replacements ErrorShapeSQL makes, in order: a timestamp before
// its numbers, a uuid before its hex parts, quoted values whole, hex ids (a word of 8 or
// more hex characters with a letter, which English words almost never are, or 0x...)
// before the digits they hold; what is left of digits are numbers.
var errorShapeRules = [][2]string{
	{`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)?`, `<time>`},
	{`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`, `<uuid>`},
	{`"([^"\\]|\\.)*"`, `"…"`},
	{`'([^'\\]|\\.)*'`, `'…'`},
	{`\m0x[0-9a-fA-F]+\M`, `<hex>`},
	{`\m(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\M`, `<hex>`},
	{`[0-9]+(\.[0-9]+)?`, `<n>`},
}

// ErrorShapeSQL is the SQL expression of the shape of the text expression expr: the
// errors of one cause ("customer cus_42 not found", "customer cus_7 not found") have one.
func ErrorShapeSQL(expr string) string {
	for _, r := range errorShapeRules {
		expr = "regexp_replace(" + expr + ", " + quoteLiteral(r[0]) + ", " + quoteLiteral(r[1]) + ", 'g')"
	}
	return expr
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// DefaultMaxShaped is how many failed tasks Failures shapes at most, the newest: shaping
// costs about 45 µs a task (docs/dashboard.md), so a burst of failures is grouped in about a
// second, from its newest part.
const DefaultMaxShaped = 20_000

// FailureReport is what Failures found.
type FailureReport struct {
	Groups []FailureGroup
	Failed int // tasks that failed in the window
	Shaped int // the newest of them, grouped: Failed, or the cap when more failed
	Now    time.Time
}

// Failures groups the tasks that failed in the last window by the shape of their error's
// first line, the largest groups first (at most limit groups); when more than maxShaped
// failed, only the newest maxShaped are grouped (0: DefaultMaxShaped).
func (s *Store) Failures(ctx context.Context, window time.Duration, limit, maxShaped int) (FailureReport, error) {
	var rep FailureReport
	if maxShaped <= 0 {
		maxShaped = DefaultMaxShaped
	}
	if err := s.pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&rep.Now); err != nil {
		return rep, err
	}
	now := rep.Now
	if err := s.pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks t
		where t.status = 'failed' and t.failed_at > $1::timestamptz - $2 * interval '1 second'`, now, window.Seconds()).Scan(&rep.Failed); err != nil {
		return rep, err
	}
	rep.Shaped = min(rep.Failed, maxShaped)
	// Failed tasks are found through pgflow's partial index on failed tasks
	// (idx_step_tasks_failed), then by when they failed, the newest maxShaped of them; each
	// error is shaped once (f is read twice, so it is materialised).
	rows, err := s.pool.Query(ctx, `
		with f as materialized (
		  select t.flow_slug || '/' || t.step_slug as step, t.step_slug, t.run_id, t.task_index, t.failed_at, x.line,
		         `+ErrorShapeSQL("x.line")+` as shape,
		         least(floor(extract(epoch from t.failed_at - ($1::timestamptz - $2 * interval '1 second')) / $2 * $4)::int, $4 - 1) as bucket
		  from (select * from pgflow.step_tasks t
		        where t.status = 'failed' and t.failed_at > $1::timestamptz - $2 * interval '1 second'
		        order by t.failed_at desc limit $5) t,
		       lateral (select left(split_part(coalesce(t.error_message, ''), E'\n', 1), 300) as line) x),
		g as (
		  select shape, count(*) as tasks, count(distinct run_id) as runs, min(failed_at) as first, max(failed_at) as last,
		         (array_agg(line order by failed_at desc))[1] as example,
		         array_agg(distinct step order by step) as steps,
		         (array_agg(run_id::text order by failed_at desc))[1] as last_run,
		         (array_agg(step_slug order by failed_at desc))[1] as last_step,
		         (array_agg(task_index order by failed_at desc))[1] as last_index
		  from f group by shape
		  order by count(*) desc, max(failed_at) desc
		  limit $3),
		b as (select shape, bucket, count(*)::int as n from f where shape in (select shape from g) group by shape, bucket)
		select g.shape, g.example, g.steps, g.tasks, g.runs, g.first, g.last, g.last_run, g.last_step, g.last_index,
		       (select array_agg(b.bucket order by b.bucket) from b where b.shape = g.shape),
		       (select array_agg(b.n order by b.bucket) from b where b.shape = g.shape)
		from g order by g.tasks desc, g.last desc`, now, window.Seconds(), limit, FailureBuckets, maxShaped)
	if err != nil {
		return rep, err
	}
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailureGroup, error) {
		var g FailureGroup
		var buckets, counts []int
		err := row.Scan(&g.Shape, &g.Example, &g.Steps, &g.Tasks, &g.Runs, &g.First, &g.Last, &g.LastRun, &g.LastStep, &g.LastIndex,
			&buckets, &counts)
		g.Buckets = make([]int, FailureBuckets)
		for i, b := range buckets {
			if b >= 0 && b < FailureBuckets && i < len(counts) {
				g.Buckets[b] += counts[i]
			}
		}
		return g, err
	})
	rep.Groups = groups
	return rep, err
}
