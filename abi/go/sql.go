package pgflow

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SQL: statements as the step's role, as far as its `sql` section in flows.yaml allows
// (abi/SPEC.md). The package stays free of encoding/json, which would grow every module
// that links it: parameters are encoded here, and the result comes back as JSON text for
// the handler's own decoder.

// Error codes of SQL (CapError.Code), as in the ABI; ErrDenied, ErrBadRequest and
// ErrRequestTooLarge are shared with HTTP.
const (
	ErrSQLRefused int32 = -11 // the statement filter refused the statement
	ErrSQLFailed  int32 = -12 // PostgreSQL raised an error (the message names its SQLSTATE)
)

// JSON is a parameter that is JSON text already (for json and jsonb columns).
type JSON []byte

// SQL runs one statement with its parameters ($1, $2, ...) and returns the result JSON:
//
//	{"columns": ["id", "total"], "rows": [[1, "12.50"]], "row_count": 1, "command": "SELECT 1"}
//
// numbers, booleans, json and jsonb keep their JSON types; any other value is PostgreSQL's
// text of it. A parameter is nil (NULL), a string, a bool, an integer, a float, or JSON;
// values travel apart from the statement and are never part of its text. A refused or
// failed statement is a *CapError whose message says why (with its SQLSTATE).
func SQL(query string, params ...any) ([]byte, error) {
	var b strings.Builder
	b.WriteString(`{"sql":`)
	quoteJSON(&b, query)
	b.WriteString(`,"params":[`)
	for i, p := range params {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeParam(&b, p); err != nil {
			return nil, &CapError{Code: ErrBadRequest, Message: "pgflow: SQL parameter $" + strconv.Itoa(i+1) + ": " + err.Error()}
		}
	}
	b.WriteString("]}")
	n := hostSQLQuery(b.String())
	if n < 0 {
		return nil, capError(n)
	}
	return hostSQLResult(n), nil
}

func encodeParam(b *strings.Builder, p any) error {
	switch v := p.(type) {
	case nil:
		b.WriteString("null")
	case string:
		quoteJSON(b, v)
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int:
		b.WriteString(strconv.FormatInt(int64(v), 10))
	case int8:
		b.WriteString(strconv.FormatInt(int64(v), 10))
	case int16:
		b.WriteString(strconv.FormatInt(int64(v), 10))
	case int32:
		b.WriteString(strconv.FormatInt(int64(v), 10))
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case uint:
		b.WriteString(strconv.FormatUint(uint64(v), 10))
	case uint8:
		b.WriteString(strconv.FormatUint(uint64(v), 10))
	case uint16:
		b.WriteString(strconv.FormatUint(uint64(v), 10))
	case uint32:
		b.WriteString(strconv.FormatUint(uint64(v), 10))
	case uint64:
		b.WriteString(strconv.FormatUint(v, 10))
	case float32:
		return encodeFloat(b, float64(v), 32)
	case float64:
		return encodeFloat(b, v, 64)
	case JSON:
		if len(v) == 0 {
			return errors.New("empty JSON")
		}
		b.Write(v)
	default:
		return errors.New("unsupported type (use nil, a string, a bool, a number or pgflow.JSON)")
	}
	return nil
}

func encodeFloat(b *strings.Builder, f float64, bits int) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return errors.New("NaN and infinities have no JSON form: pass them as strings")
	}
	b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
	return nil
}

// quoteJSON writes s as a JSON string (invalid UTF-8 becomes U+FFFD).
func quoteJSON(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
