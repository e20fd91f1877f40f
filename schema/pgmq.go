package schema

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PgmqKind says where a database's pgmq comes from.
type PgmqKind string

const (
	PgmqMissing       PgmqKind = "missing"
	PgmqLayer         PgmqKind = "layer"        // this project's layer
	PgmqReal          PgmqKind = "real"         // the real extension (anything not ours)
	PgmqForeignSchema PgmqKind = "plain-schema" // a pgmq schema not made by us nor by an extension
)

// Pgmq describes the pgmq installed in a database.
type Pgmq struct {
	Kind      PgmqKind
	Version   string // extversion, or our layer's version; "" when unknown
	Extension bool   // installed with CREATE EXTENSION (else a plain schema)
}

// String reads like "pgmq 1.5.0+pgflow-wasm.1 (pgflow-wasm layer, extension)".
func (p Pgmq) String() string {
	how := "schema"
	if p.Extension {
		how = "extension"
	}
	switch p.Kind {
	case PgmqLayer:
		return fmt.Sprintf("pgmq %s (pgflow-wasm layer, %s)", p.Version, how)
	case PgmqReal:
		return fmt.Sprintf("pgmq %s (real extension)", p.Version)
	case PgmqForeignSchema:
		return "pgmq (plain schema, not made by pgflow-wasm: version unknown)"
	}
	return "pgmq missing"
}

// AvailablePgmq is what pg_available_extensions offers under the name pgmq.
type AvailablePgmq struct {
	Version string // default_version; "" when the server offers none
	Ours    bool   // our control file (comment starts with LayerCommentPrefix)
}

// pgmqState is everything the installer and Status need to know about pgmq.
type pgmqState struct {
	Installed Pgmq
	HasSchema bool // a schema named pgmq exists
	Headers   bool // pgmq.message_record has a headers column
	Available AvailablePgmq
}

func readPgmqState(ctx context.Context, conn *pgx.Conn) (pgmqState, error) {
	var (
		s          pgmqState
		extVersion *string
		marker     bool
		hasRecord  bool
		avail      *string
		comment    *string
	)
	err := conn.QueryRow(ctx, `
		SELECT (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pgmq'),
		       to_regprocedure('pgmq.pgflow_wasm_layer()') IS NOT NULL,
		       EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmq'),
		       to_regtype('pgmq.message_record') IS NOT NULL,
		       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
		               WHERE attrelid = (SELECT typrelid FROM pg_catalog.pg_type
		                                 WHERE oid = to_regtype('pgmq.message_record'))
		                 AND attname = 'headers' AND attnum > 0 AND NOT attisdropped),
		       (SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'pgmq'),
		       (SELECT comment FROM pg_catalog.pg_available_extensions WHERE name = 'pgmq')`,
	).Scan(&extVersion, &marker, &s.HasSchema, &hasRecord, &s.Headers, &avail, &comment)
	if err != nil {
		return s, fmt.Errorf("inspecting pgmq: %w", err)
	}
	if avail != nil {
		s.Available.Version = *avail
		s.Available.Ours = comment != nil && strings.HasPrefix(*comment, LayerCommentPrefix)
	}
	switch {
	case marker:
		var v string
		if err := conn.QueryRow(ctx, `SELECT pgmq.pgflow_wasm_layer()`).Scan(&v); err != nil {
			return s, fmt.Errorf("reading the pgflow-wasm layer version: %w", err)
		}
		s.Installed = Pgmq{Kind: PgmqLayer, Version: v, Extension: extVersion != nil}
	case extVersion != nil:
		s.Installed = Pgmq{Kind: PgmqReal, Version: *extVersion, Extension: true}
	case hasRecord:
		s.Installed = Pgmq{Kind: PgmqForeignSchema}
	default:
		s.Installed = Pgmq{Kind: PgmqMissing}
	}
	return s, nil
}

// PgmqTooOldError is returned when the real pgmq predates message headers (pgmq 1.5).
type PgmqTooOldError struct {
	Version string
	Where   string // "installed" or "available"
	Hint    string
}

func (e *PgmqTooOldError) Error() string {
	msg := fmt.Sprintf("pgmq %s is too old: pgflow 0.8.1 needs pgmq >= %s (message_record.headers)", e.Version, MinPgmqVersion)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// versionAtLeast compares dotted numeric versions ("1.10.0" >= "1.5"); ok is false when
// v does not start with a number.
func versionAtLeast(v, min string) (atLeast, ok bool) {
	a, ok := parseVersion(v)
	if !ok {
		return false, false
	}
	b, _ := parseVersion(min)
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x > y, true
		}
	}
	return true, true
}

// parseVersion reads the leading numeric parts: "1.5.0+pgflow-wasm.1" -> [1 5 0].
func parseVersion(v string) ([]int, bool) {
	var out []int
	for _, part := range strings.Split(v, ".") {
		digits := part
		for i, r := range part {
			if r < '0' || r > '9' {
				digits = part[:i]
				break
			}
		}
		if digits == "" {
			break
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
		if digits != part {
			break
		}
	}
	return out, len(out) > 0
}
