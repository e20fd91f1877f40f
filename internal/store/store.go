// Package store is pgflow-wasm's one reader of pgflow's tables (runs, step_states,
// step_tasks, steps, deps, flows, workers): the command line (`start`, `runs`, `run`), the
// dashboard, the root package's StartRun and WaitRun and the tests all read through it. It
// also starts runs and writes the dashboard's one other action, deprecating a worker.
//
// Every query is built for the pgflow the database has (schema.Protocol, read once by
// Open): columns only some releases have (step_states.skip_reason and the steps' conditions
// from 0.14, workers.stopped_at from 0.10) are read only where they exist. Large JSON values
// are cut in SQL where a page shows them (RunPreview, Tasks), so a page never carries a
// megabyte output; Get and GetTree read them whole.
package store

import (
	"context"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// ErrNotFound is returned (wrapped, with the reason) for a run, step, task or worker the
// database does not have, and for an id that is not one.
var ErrNotFound = pgflowtype.ErrNotFound

// Store reads one database.
type Store struct {
	pool       *pgxpool.Pool
	proto      schema.Protocol
	staleAfter time.Duration
}

// Open reads which pgflow the database has and returns a Store for it.
func Open(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	proto, err := schema.DetectPgflow(ctx, pool)
	if err != nil {
		return nil, err
	}
	if !proto.Installed() {
		return nil, proto.Supported()
	}
	return New(pool, proto), nil
}

// New returns a Store for a database whose protocol the caller detected already.
func New(pool *pgxpool.Pool, proto schema.Protocol) *Store {
	return &Store{pool: pool, proto: proto, staleAfter: liveness.DefaultStaleAfter}
}

// WithStaleAfter returns a Store that counts a worker alive while its heartbeat is younger
// than d (the workers' own --worker-stale-after); d <= 0 keeps liveness.DefaultStaleAfter.
func (s *Store) WithStaleAfter(d time.Duration) *Store {
	c := *s
	if d > 0 {
		c.staleAfter = d
	}
	return &c
}

// Protocol is the pgflow Open found.
func (s *Store) Protocol() schema.Protocol { return s.proto }

// StaleAfter is how old a worker's heartbeat may be while it counts as alive.
func (s *Store) StaleAfter() time.Duration { return s.staleAfter }

// Pool is the connection pool the store reads.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// ParseID reads a run or worker id: a uuid written with its four hyphens
// (0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b) or without any (32 hex digits), in either case, as
// PostgreSQL itself reads them. It returns the canonical form, lower case with hyphens,
// which is how pgflow's tables print ids: links, cursors and channel names use it.
func ParseID(s string) (string, bool) {
	var hex string
	switch len(s) {
	case 36:
		for _, i := range []int{8, 13, 18, 23} {
			if s[i] != '-' {
				return "", false
			}
		}
		hex = s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	case 32:
		hex = s
	default:
		return "", false
	}
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return "", false
		}
	}
	hex = strings.ToLower(hex)
	return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:], true
}

// ParseRunID is ParseID for a run id a user typed, with the reason when it is none: an
// error that is ErrNotFound (errors.Is), since no run has it.
func ParseRunID(s string) (string, error) {
	id, ok := ParseID(s)
	if !ok {
		return "", notRunID(s)
	}
	return id, nil
}

// notRunID is the error of a text that is no run id.
type notRunID string

func (e notRunID) Error() string {
	return fmt.Sprintf("%q is not a run id: run ids are uuids such as 0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b (see `pgflow-wasm runs`)", string(e))
}

func (notRunID) Is(target error) bool { return target == ErrNotFound }

// JSON is a JSON value as a page shows it: its text, cut to CutBytes.
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
// toJSON reads the pair.
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

// Now is the database's clock: ages and running durations are measured against it, so a
// reader on another machine with a skewed clock still shows them right.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&now)
	return now, err
}
