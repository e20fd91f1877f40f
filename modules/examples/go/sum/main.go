//go:build wasip1

// sum: adds up every number in its input, at any depth, in document order, as doubles from
// 0: [1,[2,{"x":3}],"a"] -> {"sum":6}. A step with dependencies gets {"run": <flow input>,
// "<dep>": <its output>, ...}: when the input is an object with "run" and another member,
// the flow input is left out and only the other members count
// ({"run":[10],"a":[1,2]} -> {"sum":3}).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
	"github.com/pgflow-wasm/pgflow-wasm/modules/examples/go/internal/jsonfmt"
)

func sum(input, _ []byte) ([]byte, error) {
	if !json.Valid(input) {
		return nil, errors.New("sum: invalid JSON input")
	}
	total := 0.0
	for _, value := range counted(input) {
		if err := addNumbers(value, &total); err != nil {
			return nil, err
		}
	}
	out, ok := jsonfmt.Number(total)
	if !ok {
		return nil, errors.New("sum: the sum is not a finite number")
	}
	return []byte(`{"sum":` + out + `}`), nil
}

// counted returns the values whose numbers count: the members other than "run" when input
// (valid JSON) is an object with "run" and another member, else input itself.
func counted(input []byte) [][]byte {
	// A map would lose the members' order and repeated names: walk them with a Decoder.
	dec := json.NewDecoder(bytes.NewReader(input))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return [][]byte{input}
	}
	var others [][]byte
	hasRun := false
	for dec.More() {
		name, err := dec.Token()
		var value json.RawMessage
		if err == nil {
			err = dec.Decode(&value)
		}
		if err != nil { // not reached: input is valid JSON
			return [][]byte{input}
		}
		if name == "run" {
			hasRun = true
		} else {
			others = append(others, value)
		}
	}
	if hasRun && len(others) > 0 {
		return others
	}
	return [][]byte{input}
}

// addNumbers adds every number in value (valid JSON) to total, in document order.
func addNumbers(value []byte, total *float64) error {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber() // the number's text, read below with strconv's exact parser
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errors.New("sum: invalid JSON input") // not reached: value is valid JSON
		}
		number, ok := tok.(json.Number)
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(string(number), 64)
		if err != nil { // the syntax is valid, so the number is too large for a double
			return errors.New("sum: number " + shorten(string(number)) + " is out of range")
		}
		*total += x
	}
}

// shorten cuts a number's text for an error message: one out of range can have hundreds
// of digits.
func shorten(number string) string {
	if len(number) > 40 {
		return number[:40] + "..."
	}
	return number
}

func init() { pgflow.Handle(sum) }

func main() {}
