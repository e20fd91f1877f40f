package sqlcap

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// Request is one statement and its parameters, parsed from the guest's JSON
// {"sql": "...", "params": [...]}.
type Request struct {
	SQL string
	// Params are the values of $1, $2, ... in PostgreSQL's text form, nil for NULL. They
	// travel as parameters of the extended protocol with no declared type, so PostgreSQL
	// infers each from where it is used (cast with $1::int where it cannot), and a value is
	// never part of the statement's text.
	Params [][]byte
}

// ParseRequest reads the guest's request. A JSON string parameter is its text; a number its
// literal digits (exact: 0.1 stays 0.1, a 30-digit integer stays whole); true and false
// are booleans; null is NULL; an object or array is its JSON text (for json and jsonb).
func ParseRequest(b []byte) (Request, *Error) {
	if len(b) > MaxRequestBytes {
		return Request{}, Errorf(abi.ErrRequestTooLarge, "request_too_large", "the request is %s, over the cap of %s",
			bytesize.Text(uint64(len(b))), bytesize.Text(MaxRequestBytes))
	}
	bad := func(format string, args ...any) (Request, *Error) {
		return Request{}, Errorf(abi.ErrBadRequest, "bad_request", format, args...)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	var raw struct {
		SQL    *string           `json:"sql"`
		Params []json.RawMessage `json:"params"`
	}
	if err := dec.Decode(&raw); err != nil {
		// The decoder's message may quote the input: say only what is expected.
		return bad(`the request is not a JSON object like {"sql": "select ...", "params": [...]} with only those two keys`)
	}
	if dec.More() {
		return bad("the request has more than one JSON value")
	}
	if raw.SQL == nil || *raw.SQL == "" {
		return bad(`the request has no "sql" string`)
	}
	if len(raw.Params) > MaxParams {
		return bad("%d parameters: a statement takes at most %d", len(raw.Params), MaxParams)
	}
	req := Request{SQL: *raw.SQL, Params: make([][]byte, len(raw.Params))}
	for i, p := range raw.Params {
		v, ok := paramText(p)
		if !ok {
			return bad("parameter $%d is not a JSON value", i+1)
		}
		req.Params[i] = v
	}
	return req, nil
}

// paramText is a parameter's text form; nil for null.
func paramText(p json.RawMessage) ([]byte, bool) {
	p = bytes.TrimSpace(p)
	if len(p) == 0 {
		return nil, false
	}
	switch p[0] {
	case 'n':
		return nil, true
	case '"':
		var s string
		if json.Unmarshal(p, &s) != nil {
			return nil, false
		}
		return []byte(s), true
	case '{', '[':
		var buf bytes.Buffer
		if json.Compact(&buf, p) != nil {
			return nil, false
		}
		return buf.Bytes(), true
	case 't', 'f':
		b, err := strconv.ParseBool(string(p))
		if err != nil {
			return nil, false
		}
		return []byte(strconv.FormatBool(b)), true
	}
	return append([]byte(nil), p...), true // a number, already checked by the decoder
}
