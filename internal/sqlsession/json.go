package sqlsession

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Type OIDs whose text form is written as JSON of its own kind. Results are read in
// PostgreSQL's text format, so every value is exactly what psql would show: numbers keep
// every digit (a numeric(30,10) is not squeezed through a float64), json and jsonb pass
// through as they are, and any other type is a JSON string of its text (timestamps, uuids,
// arrays as '{1,2}', bytea as '\x...'). A query wanting nested JSON asks for it with
// to_jsonb or json_agg.
const (
	oidBool    = 16
	oidInt8    = 20
	oidInt2    = 21
	oidInt4    = 23
	oidOID     = 26
	oidJSON    = 114
	oidFloat4  = 700
	oidFloat8  = 701
	oidNumeric = 1700
	oidJSONB   = 3802
)

// writer builds {"columns": [...], "rows": [[...], ...], "row_count": N, "command": "..."}.
// A typed writer (the request's "typed") adds "types": [oid, ...] after the columns and
// writes every value as a JSON string of its text, null for NULL: the guest decodes each
// by its type (an int8 keeps every digit, a text[] can be split into its elements).
type writer struct {
	oids  []uint32
	typed bool
	buf   []byte
	rows  int
}

func newWriter(fields []pgconn.FieldDescription, typed bool) *writer {
	w := &writer{oids: make([]uint32, len(fields)), typed: typed}
	w.buf = append(w.buf, `{"columns":[`...)
	for i, f := range fields {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.buf = appendString(w.buf, f.Name)
		w.oids[i] = f.DataTypeOID
	}
	if typed {
		w.buf = append(w.buf, `],"types":[`...)
		for i, oid := range w.oids {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.buf = strconv.AppendUint(w.buf, uint64(oid), 10)
		}
	}
	w.buf = append(w.buf, `],"rows":[`...)
	return w
}

func (w *writer) len() int { return len(w.buf) }

func (w *writer) row(values [][]byte) {
	if w.rows > 0 {
		w.buf = append(w.buf, ',')
	}
	w.rows++
	w.buf = append(w.buf, '[')
	for i, v := range values {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		var oid uint32
		if i < len(w.oids) {
			oid = w.oids[i]
		}
		switch {
		case !w.typed:
			w.buf = appendValue(w.buf, oid, v)
		case v == nil:
			w.buf = append(w.buf, "null"...)
		default:
			w.buf = appendString(w.buf, string(v))
		}
	}
	w.buf = append(w.buf, ']')
}

func (w *writer) finish(rowCount int64, command string) []byte {
	w.buf = append(w.buf, `],"row_count":`...)
	w.buf = strconv.AppendInt(w.buf, rowCount, 10)
	w.buf = append(w.buf, `,"command":`...)
	w.buf = appendString(w.buf, command)
	return append(w.buf, '}')
}

func appendValue(b []byte, oid uint32, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	switch oid {
	case oidBool:
		if len(v) == 1 && v[0] == 't' {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case oidInt2, oidInt4, oidInt8, oidOID:
		return append(b, v...)
	case oidFloat4, oidFloat8, oidNumeric:
		// NaN and the infinities have no JSON number: they stay strings.
		if isJSONNumber(v) {
			return append(b, v...)
		}
	case oidJSON, oidJSONB:
		if json.Valid(v) {
			return append(b, v...)
		}
	}
	return appendString(b, string(v))
}

// isJSONNumber reports whether v (PostgreSQL's text of a number) is a JSON number.
func isJSONNumber(v []byte) bool {
	if len(v) == 0 || !(v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
		return false
	}
	return json.Valid(v)
}

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = string([]rune(s))
	}
	q, _ := json.Marshal(s)
	return append(b, q...)
}
