package sqlcap

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// Request is one statement and its parameters, parsed from the guest's JSON
// {"sql": "...", "params": [...]} (abi/SPEC.md, SQL), with optional keys: "param_types",
// "typed", "savepoint"; or a transaction request {"tx": "begin" | "commit" | "rollback"},
// which the host turns into BEGIN or SAVEPOINT statements of its own (the guest's text can
// never hold transaction control: the filter refuses it).
type Request struct {
	SQL string
	// Tx is "begin", "commit" or "rollback" for a transaction request (SQL is then empty).
	Tx string
	// ParamTypes are the type OIDs of the parameters (0: inferred); shorter than Params or
	// nil leaves the rest inferred.
	ParamTypes []uint32
	// Typed asks for the result with a "types" array (each column's type OID) and every
	// value as PostgreSQL's text of it (null for NULL): the guest decodes the types.
	Typed bool
	// Savepoint asks for the statement to run inside a savepoint of its own when it runs in
	// a transaction that outlives it (a transactional step's task): a failure then rolls
	// back that statement alone and the transaction goes on.
	Savepoint bool
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
		SQL        *string           `json:"sql"`
		Params     []json.RawMessage `json:"params"`
		ParamTypes []uint32          `json:"param_types"`
		Typed      bool              `json:"typed"`
		Savepoint  bool              `json:"savepoint"`
		Tx         string            `json:"tx"`
	}
	if err := dec.Decode(&raw); err != nil {
		// The decoder's message may quote the input: say only what is expected.
		return bad(`the request is not a JSON object like {"sql": "select ...", "params": [...]} (keys: sql, params, ` +
			`param_types, typed, savepoint) or {"tx": "begin"}`)
	}
	if dec.More() {
		return bad("the request has more than one JSON value")
	}
	if raw.Tx != "" {
		switch {
		case raw.Tx != "begin" && raw.Tx != "commit" && raw.Tx != "rollback":
			return bad(`"tx" is "begin", "commit" or "rollback"`)
		case raw.SQL != nil || raw.Params != nil || raw.ParamTypes != nil:
			return bad(`a "tx" request has no "sql", "params" or "param_types": the host writes the transaction's statements`)
		}
		return Request{Tx: raw.Tx}, nil
	}
	if raw.SQL == nil || *raw.SQL == "" {
		return bad(`the request has no "sql" string`)
	}
	if len(raw.Params) > MaxParams {
		return bad("%d parameters: a statement takes at most %d", len(raw.Params), MaxParams)
	}
	if len(raw.ParamTypes) > len(raw.Params) {
		return bad(`"param_types" has %d types for %d parameters`, len(raw.ParamTypes), len(raw.Params))
	}
	req := Request{SQL: *raw.SQL, Params: make([][]byte, len(raw.Params)), ParamTypes: raw.ParamTypes,
		Typed: raw.Typed, Savepoint: raw.Savepoint}
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
