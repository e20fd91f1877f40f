package sqlcap

import (
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

func TestParseRequest(t *testing.T) {
	req, err := ParseRequest([]byte(`{"sql": "select $1, $2, $3, $4, $5, $6, $7",
		"params": ["it's", 12345678901234567890123, 0.1, true, null, {"a": [1, 2]}, [ "x" ]]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"it's", "12345678901234567890123", "0.1", "true", "<nil>", `{"a":[1,2]}`, `["x"]`}
	if req.SQL != "select $1, $2, $3, $4, $5, $6, $7" || len(req.Params) != len(want) {
		t.Fatalf("%+v", req)
	}
	for i, p := range req.Params {
		got := string(p)
		if p == nil {
			got = "<nil>"
		}
		if got != want[i] {
			t.Errorf("param %d = %q, want %q", i+1, got, want[i])
		}
	}
	for _, c := range []struct{ in, want string }{
		{`"select 1"`, "is not a JSON object"},
		{`{"sql": "select 1", "param": []}`, "is not a JSON object"},
		{`{"sql": 1}`, "is not a JSON object"},
		{`{"params": []}`, `has no "sql" string`},
		{`{"sql": ""}`, `has no "sql" string`},
		{`{"sql": "select 1"} {}`, "more than one JSON value"},
		{`{"sql": "select $1", "params": {"a": 1}}`, "is not a JSON object"},
		{`{"tx": "commit;"}`, `"tx" is "begin", "commit" or "rollback"`},
		{`{"tx": "begin", "sql": "begin"}`, `a "tx" request has no "sql"`},
		{`{"sql": "select $1", "params": [1], "param_types": [23, 23]}`, `"param_types" has 2 types for 1 parameters`},
	} {
		_, err := ParseRequest([]byte(c.in))
		if err == nil || err.Code != abi.ErrBadRequest || !strings.Contains(err.Message, c.want) {
			t.Errorf("ParseRequest(%s) = %v, want %q", c.in, err, c.want)
		}
	}
	req, err = ParseRequest([]byte(`{"sql": "select $1", "params": ["x"], "param_types": [3802], "typed": true, "savepoint": true}`))
	if err != nil || len(req.ParamTypes) != 1 || req.ParamTypes[0] != 3802 || !req.Typed || !req.Savepoint || req.Tx != "" {
		t.Errorf("the optional keys: %+v, %v", req, err)
	}
	if req, err := ParseRequest([]byte(`{"tx": "rollback"}`)); err != nil || req.Tx != "rollback" || req.SQL != "" {
		t.Errorf("a tx request: %+v, %v", req, err)
	}
	if _, err := ParseRequest(make([]byte, MaxRequestBytes+1)); err == nil || err.Code != abi.ErrRequestTooLarge {
		t.Errorf("oversized request: %v", err)
	}
}
