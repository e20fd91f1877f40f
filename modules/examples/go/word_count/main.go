//go:build wasip1

// word_count: one map element, a string -> {"text":<the string>,"words":<count>}
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
	"github.com/pgflow-wasm/pgflow-wasm/modules/examples/go/internal/jsonfmt"
)

func wordCount(input, _ []byte) ([]byte, error) {
	if !json.Valid(input) {
		return nil, errors.New("word_count: invalid JSON input")
	}
	var text string
	// Unmarshal would also accept null as "": look at the value's first byte.
	if trimmed := bytes.TrimLeft(input, " \t\r\n"); trimmed[0] != '"' || json.Unmarshal(input, &text) != nil {
		return nil, errors.New("word_count: input must be a JSON string")
	}
	// strings.Fields splits on Unicode White_Space, as the other languages do.
	words := len(strings.Fields(text))
	return []byte(`{"text":` + jsonfmt.Quote(text) + `,"words":` + strconv.Itoa(words) + `}`), nil
}

func init() { pgflow.Handle(wordCount) }

func main() {}
