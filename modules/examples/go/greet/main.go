//go:build wasip1

// greet: {"run": {"name": "Ada"}} -> {"greeting":"Hello, Ada!"}
package main

import (
	"encoding/json"
	"errors"

	pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
	"github.com/pgflow-wasm/pgflow-wasm/modules/examples/go/internal/jsonfmt"
)

func greet(input, _ []byte) ([]byte, error) {
	if !json.Valid(input) {
		return nil, errors.New("greet: invalid JSON input")
	}
	// Maps of raw members, not a struct: struct fields would also match "Name" or "NAME".
	var in, run map[string]json.RawMessage
	var name string
	if json.Unmarshal(input, &in) != nil || json.Unmarshal(in["run"], &run) != nil ||
		!isString(run["name"]) || json.Unmarshal(run["name"], &name) != nil {
		return nil, errors.New("greet: input.run.name must be a string")
	}
	return []byte(`{"greeting":` + jsonfmt.Quote("Hello, "+name+"!") + `}`), nil
}

func isString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }

func init() { pgflow.Handle(greet) }

func main() {}
