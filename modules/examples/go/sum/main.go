//go:build wasip1

// sum: adds up the first array among the input object's values (or the input itself when
// it is an array): {"run":[1,2,3]} -> {"sum":6}. Doubles, added left to right from 0.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
	"github.com/pgflow-wasm/pgflow-wasm/modules/examples/go/internal/jsonfmt"
)

func sum(input, _ []byte) ([]byte, error) {
	if !json.Valid(input) {
		return nil, errors.New("sum: invalid JSON input")
	}
	items, ok := firstArray(input)
	if !ok {
		return nil, errors.New("sum: input has no array of numbers")
	}
	total := 0.0
	for i, item := range items {
		if c := item[0]; c != '-' && (c < '0' || c > '9') {
			return nil, errors.New("sum: element " + strconv.Itoa(i) + " is not a number")
		}
		x, err := strconv.ParseFloat(string(item), 64)
		if err != nil {
			return nil, errors.New("sum: element " + strconv.Itoa(i) + " is out of range")
		}
		total += x
	}
	out, ok := jsonfmt.Number(total)
	if !ok {
		return nil, errors.New("sum: the sum is not a finite number")
	}
	return []byte(`{"sum":` + out + `}`), nil
}

// firstArray returns the elements of input when it is an array, else of the first member
// of the input object (in input order) that is an array. input is valid JSON.
func firstArray(input []byte) ([]json.RawMessage, bool) {
	if trimmed := bytes.TrimLeft(input, " \t\r\n"); trimmed[0] == '[' {
		return elements(input)
	}
	// A map would lose the members' order: walk them with a Decoder.
	dec := json.NewDecoder(bytes.NewReader(input))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		var value json.RawMessage
		if _, err := dec.Token(); err != nil { // the member's name
			return nil, false
		}
		if err := dec.Decode(&value); err != nil {
			return nil, false
		}
		if value = bytes.TrimLeft(value, " \t\r\n"); value[0] == '[' {
			return elements(value)
		}
	}
	return nil, false
}

func elements(array []byte) ([]json.RawMessage, bool) {
	var items []json.RawMessage
	if err := json.Unmarshal(array, &items); err != nil {
		return nil, false
	}
	return items, true
}

func init() { pgflow.Handle(sum) }

func main() {}
