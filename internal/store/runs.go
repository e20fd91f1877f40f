package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// RunStatuses are the states a run can be in (every pgflow release).
var RunStatuses = []string{"started", "completed", "failed"}

// runCols are the columns every read of a run selects, in scanRun's order, then values
// (its input and output, whole or cut; "" for none).
func runCols(errorChars int, values string) string {
	msg := "ss.error_message"
	if errorChars > 0 {
		msg = fmt.Sprintf("left(ss.error_message, %d)", errorChars)
	}
	return `r.run_id::text, r.flow_slug, r.status, r.remaining_steps, r.started_at, r.completed_at, r.failed_at,
	       case when r.status = 'failed' then coalesce((select ` + msg + ` from pgflow.step_states ss
	            where ss.run_id = r.run_id and ss.status = 'failed' order by ss.failed_at limit 1), '') else '' end,
	       case when r.status = 'failed' then coalesce((select ss.step_slug from pgflow.step_states ss
	            where ss.run_id = r.run_id and ss.status = 'failed' order by ss.failed_at limit 1), '') else '' end` + values
}

func scanRun(row pgx.Row, r *pgflowtype.Run, values ...any) error {
	return row.Scan(append([]any{&r.ID, &r.Flow, &r.Status, &r.RemainingSteps, &r.StartedAt, &r.CompletedAt,
		&r.FailedAt, &r.Error, &r.FailedStep}, values...)...)
}

// Get reads one run with its input and output whole.
func (s *Store) Get(ctx context.Context, id string) (*pgflowtype.Run, error) {
	return getRun(ctx, s.pool, id)
}

// getRun reads a run through q (the pool, or the connection a wait holds).
func getRun(ctx context.Context, q Querier, id string) (*pgflowtype.Run, error) {
	id, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	var r pgflowtype.Run
	var input, output []byte
	err = scanRun(q.QueryRow(ctx, `select `+runCols(0, `, r.input, r.output`)+`
		from pgflow.runs r where r.run_id = $1::uuid`, id), &r, &input, &output)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("no run %s in this database: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	r.Input, r.Output = input, output
	if r.Output == nil {
		r.Output = json.RawMessage("null")
	}
	return &r, nil
}

// RunPreview is a run as a page shows it: its input and output cut to CutBytes (whole with
// RunValue), read with the database's clock.
type RunPreview struct {
	pgflowtype.Run
	// Input and Output hide pgflowtype.Run's: the beginnings of the values, and their whole sizes.
	Input, Output JSON
	Now           time.Time // the database's clock when the run was read
}

// Preview reads one run for a page.
func (s *Store) Preview(ctx context.Context, id string) (*RunPreview, error) {
	id, err := ParseRunID(id)
	if err != nil {
		return nil, err
	}
	var p RunPreview
	var in, out *string
	var inN, outN *int
	err = scanRun(s.pool.QueryRow(ctx, `select `+runCols(0, `, `+jsonCols("r.input")+`, `+jsonCols("r.output")+`, clock_timestamp()`)+`
		from pgflow.runs r where r.run_id = $1::uuid`, id), &p.Run, &in, &inN, &out, &outN, &p.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("no run %s in this database: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	p.Input, p.Output = toJSON(in, inN), toJSON(out, outN)
	return &p, nil
}

// Cursor is a position in the runs list, newest first: (started_at, run_id) of a run. The
// list is a keyset over that pair (schema.RunsIndex serves it): a page costs the same at the
// end of the list as at its start, unlike OFFSET.
type Cursor struct {
	StartedAt time.Time
	RunID     string
}

// String encodes the cursor for a URL: unix microseconds, a dot, the run id.
func (c Cursor) String() string {
	return strconv.FormatInt(c.StartedAt.UnixMicro(), 10) + "." + c.RunID
}

// ParseCursor reads what String wrote.
func ParseCursor(s string) (Cursor, error) {
	micros, raw, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(micros, 10, 64)
	id, valid := ParseID(raw)
	if !ok || err != nil || !valid {
		return Cursor{}, fmt.Errorf("bad page position %q", s)
	}
	return Cursor{StartedAt: time.UnixMicro(n), RunID: id}, nil
}

// RunFilter selects a page of runs.
type RunFilter struct {
	Flow   string  // "" for every flow
	Status string  // "" for every status
	Before *Cursor // runs older than this one (the next page)
	After  *Cursor // runs newer than this one (the previous page)
	Limit  int     // default 50, at most 500
}

// RunPage is a page of runs, newest first, with the cursors of its neighbours.
type RunPage struct {
	Runs  []pgflowtype.Run // without their input and output
	Older *Cursor          // nil on the last page
	Newer *Cursor          // nil on the first page
	Now   time.Time        // the database's clock
}

// List returns a page of runs, newest first.
func (s *Store) List(ctx context.Context, f RunFilter) (RunPage, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 500)
	if f.Status != "" && !slices.Contains(RunStatuses, f.Status) {
		return RunPage{}, fmt.Errorf("unknown status %q: use %s", f.Status, strings.Join(RunStatuses, ", "))
	}
	now, err := s.Now(ctx)
	if err != nil {
		return RunPage{}, err
	}
	page := RunPage{Now: now}
	if f.After != nil {
		rows, err := s.queryRuns(ctx, f, f.After, ">", "asc")
		if err != nil {
			return page, err
		}
		if len(rows) > f.Limit {
			slices.Reverse(rows[:f.Limit])
			page.Runs = rows[:f.Limit]
			page.Newer = &Cursor{page.Runs[0].StartedAt, page.Runs[0].ID}
			page.Older = &Cursor{page.Runs[len(page.Runs)-1].StartedAt, page.Runs[len(page.Runs)-1].ID}
			return page, nil
		}
		// Fewer than a page of newer runs: that is the first page.
		f.After = nil
		f.Before = nil
	}
	rows, err := s.queryRuns(ctx, f, f.Before, "<", "desc")
	if err != nil {
		return page, err
	}
	if len(rows) > f.Limit {
		rows = rows[:f.Limit]
		last := rows[len(rows)-1]
		page.Older = &Cursor{last.StartedAt, last.ID}
	}
	page.Runs = rows
	if f.Before != nil && len(rows) > 0 {
		page.Newer = &Cursor{rows[0].StartedAt, rows[0].ID}
	}
	return page, nil
}

// queryRuns reads limit+1 runs on one side of the cursor, in the given order.
func (s *Store) queryRuns(ctx context.Context, f RunFilter, c *Cursor, cmp, dir string) ([]pgflowtype.Run, error) {
	var where []string
	args := pgx.NamedArgs{"limit": f.Limit + 1}
	if f.Flow != "" {
		where = append(where, "r.flow_slug = @flow")
		args["flow"] = f.Flow
	}
	if f.Status != "" {
		where = append(where, "r.status = @status")
		args["status"] = f.Status
	}
	if c != nil {
		where = append(where, "(r.started_at, r.run_id) "+cmp+" (@at, @id::uuid)")
		args["at"], args["id"] = c.StartedAt, c.RunID
	}
	sql := `select ` + runCols(300, "") + ` from pgflow.runs r`
	if len(where) > 0 {
		sql += " where " + strings.Join(where, " and ")
	}
	sql += fmt.Sprintf(" order by r.started_at %[1]s, r.run_id %[1]s limit @limit", dir)
	rows, err := s.pool.Query(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (pgflowtype.Run, error) {
		var r pgflowtype.Run
		err := scanRun(row, &r)
		return r, err
	})
}

// FlowSlugs lists every flow in the database, for the runs page's filter.
func (s *Store) FlowSlugs(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `select flow_slug from pgflow.flows order by flow_slug`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
