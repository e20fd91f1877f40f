package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// MinSearch is the fewest hex digits SearchRuns looks for.
const MinSearch = 4

// ErrBadSearch is SearchRuns refusing its text: not part of a run id, or too short.
var ErrBadSearch = errors.New("not a run id search")

// SearchResult is what SearchRuns found: runs whose id begins with the text (Prefix) or,
// when none does, contains it.
type SearchResult struct {
	Runs   []Run // newest first
	More   bool  // more runs match than were read
	Prefix bool  // the runs' ids begin with the text (else they contain it)
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
		res.Runs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
			var r Run
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
	slices.SortStableFunc(res.Runs, func(a, b Run) int { return b.StartedAt.Compare(a.StartedAt) })
	return res, nil
}
