package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// RunStatuses are the states a run can be in (both pgflow versions).
var RunStatuses = []string{"started", "completed", "failed"}

// Cursor is a position in the runs list, newest first: (started_at, run_id) of a run.
// pgflow.runs has no index on started_at, so the list is a keyset over that pair: a page
// costs the same at the end of the list as at its start, unlike OFFSET.
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
	micros, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || !ValidID(id) {
		return Cursor{}, fmt.Errorf("bad page position %q", s)
	}
	return Cursor{StartedAt: time.UnixMicro(n), RunID: strings.ToLower(id)}, nil
}

// RunFilter selects a page of runs.
type RunFilter struct {
	Flow   string  // "" for every flow
	Status string  // "" for every status
	Before *Cursor // runs older than this one (the next page)
	After  *Cursor // runs newer than this one (the previous page)
	Limit  int     // default 50, at most 500
}

// RunRow is one line of the runs list.
type RunRow struct {
	ID          string
	Flow        string
	Status      string
	StartedAt   time.Time
	CompletedAt *time.Time
	FailedAt    *time.Time
	Error       string // the first failed step's error, cut to 300 characters
}

// EndedAt is when the run completed or failed, nil while it runs.
func (r RunRow) EndedAt() *time.Time {
	if r.CompletedAt != nil {
		return r.CompletedAt
	}
	return r.FailedAt
}

// RunPage is a page of runs, newest first, with the cursors of its neighbours.
type RunPage struct {
	Runs  []RunRow
	Older *Cursor // nil on the last page
	Newer *Cursor // nil on the first page
	Now   time.Time
}

// ListRuns returns a page of runs, newest first.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) (RunPage, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 500)
	if f.Status != "" && !slices.Contains(RunStatuses, f.Status) {
		return RunPage{}, fmt.Errorf("unknown status %q: use %s", f.Status, strings.Join(RunStatuses, ", "))
	}
	now, err := s.dbNow(ctx)
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
func (s *Store) queryRuns(ctx context.Context, f RunFilter, c *Cursor, cmp, dir string) ([]RunRow, error) {
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
	sql := `select r.run_id::text, r.flow_slug, r.status, r.started_at, r.completed_at, r.failed_at,
		       case when r.status = 'failed' then coalesce((select left(ss.error_message, 300) from pgflow.step_states ss
		            where ss.run_id = r.run_id and ss.status = 'failed' order by ss.failed_at limit 1), '') else '' end
		from pgflow.runs r`
	if len(where) > 0 {
		sql += " where " + strings.Join(where, " and ")
	}
	sql += fmt.Sprintf(" order by r.started_at %[1]s, r.run_id %[1]s limit @limit", dir)
	rows, err := s.pool.Query(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunRow, error) {
		var r RunRow
		err := row.Scan(&r.ID, &r.Flow, &r.Status, &r.StartedAt, &r.CompletedAt, &r.FailedAt, &r.Error)
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
