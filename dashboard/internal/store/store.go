// Package store reads what the dashboard shows from pgflow's tables (runs, step_states,
// step_tasks, steps, deps, flows, workers) and writes its two actions.
//
// Every query uses only columns present in both pgflow 0.8.1 and 0.14.1. Columns that only
// newer releases have (step_states.skip_reason, workers.stopped_at, steps'
// condition columns) are probed once in pg_attribute and read only when present.
// Large JSON values are cut in SQL, so a page never carries a megabyte output.
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned for a run, step, task or worker the database does not have.
var ErrNotFound = errors.New("not found")

// Caps says which optional columns this database's pgflow has.
type Caps struct {
	SkipReason      bool // step_states.skip_reason (0.14)
	WorkerStoppedAt bool // workers.stopped_at (0.10)
	StepConditions  bool // steps.required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted (0.14)
}

// Store reads one database.
type Store struct {
	pool *pgxpool.Pool
	caps Caps
}

// Open probes the schema and returns a Store.
func Open(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	s := &Store{pool: pool}
	err := pool.QueryRow(ctx, `
		select exists (select 1 from pg_attribute where attrelid = to_regclass('pgflow.step_states') and attname = 'skip_reason' and not attisdropped),
		       exists (select 1 from pg_attribute where attrelid = to_regclass('pgflow.workers') and attname = 'stopped_at' and not attisdropped),
		       exists (select 1 from pg_attribute where attrelid = to_regclass('pgflow.steps') and attname = 'required_input_pattern' and not attisdropped)`).
		Scan(&s.caps.SkipReason, &s.caps.WorkerStoppedAt, &s.caps.StepConditions)
	if err != nil {
		return nil, fmt.Errorf("probing pgflow's schema: %w", err)
	}
	return s, nil
}

// Caps returns what Open found.
func (s *Store) Caps() Caps { return s.caps }

// Pool is the connection pool the store reads.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// JSON is a JSON value as the dashboard shows it: its text, cut to a limit.
type JSON struct {
	Text  string // jsonb's text form, possibly cut
	Bytes int    // length of the whole text
	Null  bool   // SQL NULL (no value yet)
}

// Cut reports whether Text is only the beginning of the value.
func (j JSON) Cut() bool { return len(j.Text) < j.Bytes }

// CutBytes is how much of a JSON value a page shows inline.
const CutBytes = 2048

// jsonCols selects a jsonb expression as its first CutBytes characters and its full length;
// scanJSON reads the pair.
func jsonCols(expr string) string {
	return fmt.Sprintf("left((%[1]s)::text, %[2]d), octet_length((%[1]s)::text)", expr, CutBytes)
}

func toJSON(text *string, n *int) JSON {
	if text == nil {
		return JSON{Null: true}
	}
	j := JSON{Text: *text, Bytes: len(*text)}
	if n != nil {
		j.Bytes = *n
	}
	// left() counts characters, octet_length bytes: Cut compares byte lengths.
	return j
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ValidID reports whether s is a uuid in its canonical text form (run and worker ids).
func ValidID(s string) bool { return uuidRE.MatchString(s) }

// dbNow is the database's clock: ages and running durations are measured against it, so a
// dashboard on another machine with a skewed clock still shows them right.
func (s *Store) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&now)
	return now, err
}
