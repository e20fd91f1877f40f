package store

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// InputQueryPrefix begins a search by input field: `input.customer = cus_42`.
const InputQueryPrefix = "input."

// IsInputQuery reports whether a search text is a search by input field.
func IsInputQuery(q string) bool { return strings.HasPrefix(strings.TrimSpace(q), InputQueryPrefix) }

var (
	inputTerm = regexp.MustCompile(`^input((?:\.[A-Za-z0-9_$-]+)+)\s*=\s*(.+)$`)
	andWord   = regexp.MustCompile(`(?i)\s+and\s+`)
)

// ParseInputQuery turns `input.a.b = v [and input.c = w ...]` into the JSON object the
// runs' input must contain: {"a": {"b": v}, "c": w}. A value that is JSON (a number, true,
// false, null, a "quoted string", an object or an array) is that value; anything else is the
// string as typed, so `input.customer = cus_42` finds {"customer": "cus_42"}. Paths go
// through objects only: an element of an array is matched by giving the array, e.g.
// `input.items = [{"sku": "A1"}]` (containment: any element with that sku).
func ParseInputQuery(q string) (json.RawMessage, error) {
	doc := map[string]any{}
	for _, term := range andWord.Split(strings.TrimSpace(q), -1) {
		m := inputTerm.FindStringSubmatch(strings.TrimSpace(term))
		if m == nil {
			return nil, fmt.Errorf("%w: %q is not input.FIELD = VALUE (e.g. input.customer = cus_42; join several with and)", ErrBadSearch, term)
		}
		keys := strings.Split(m[1][1:], ".")
		raw := strings.TrimSpace(m[2])
		var v any = raw
		if json.Valid([]byte(raw)) {
			_ = json.Unmarshal([]byte(raw), &v)
		}
		node := doc
		for i, k := range keys {
			if i == len(keys)-1 {
				if _, taken := node[k]; taken {
					return nil, fmt.Errorf("%w: input.%s is given twice", ErrBadSearch, strings.Join(keys, "."))
				}
				node[k] = v
				break
			}
			next, ok := node[k].(map[string]any)
			if !ok {
				if _, taken := node[k]; taken {
					return nil, fmt.Errorf("%w: input.%s is given a value and fields", ErrBadSearch, strings.Join(keys[:i+1], "."))
				}
				next = map[string]any{}
				node[k] = next
			}
			node = next
		}
	}
	return json.Marshal(doc)
}

// SearchInput finds the runs whose input contains doc (input @> doc), newest first, at most
// limit. schema.InputIndex (a GIN index, jsonb_path_ops) finds them without reading every
// run; without it the query reads all of pgflow.runs. Every match is read and sorted.
func (s *Store) SearchInput(ctx context.Context, doc json.RawMessage, limit int) (SearchResult, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{Now: now}
	// The matches first, then their order: left to itself the planner walks RunsIndex newest
	// first and tests every run's input, which reads the whole table for a value few runs
	// have (its estimate of a containment's matches is a constant). This way the cost grows
	// with the runs that match, found through InputIndex.
	rows, err := s.pool.Query(ctx, `with m as materialized (select r.run_id from pgflow.runs r where r.input @> $1::jsonb)
		select `+runCols(300, "")+` from pgflow.runs r where r.run_id in (select run_id from m)
		order by r.started_at desc, r.run_id desc limit $2`, string(doc), limit+1)
	if err != nil {
		return res, err
	}
	res.Runs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (pgflowtype.Run, error) {
		var r pgflowtype.Run
		err := scanRun(row, &r)
		return r, err
	})
	if len(res.Runs) > limit {
		res.Runs, res.More = res.Runs[:limit], true
	}
	return res, err
}
