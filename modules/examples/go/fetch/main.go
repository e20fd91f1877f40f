//go:build wasip1

// fetch: {"run": {"url": "https://..."}} -> {"status":200,"bytes":1256}
//
// GETs the URL through the host (the step's http.allow in flows.yaml must cover it). An
// HTTP error status is an output like any other; a refused request fails the task with the
// host's message.
package main

import (
	"encoding/json"
	"errors"
	"strconv"

	pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
)

func fetch(input, _ []byte) ([]byte, error) {
	var in struct {
		Run map[string]json.RawMessage `json:"run"`
	}
	var url string
	if json.Unmarshal(input, &in) != nil || json.Unmarshal(in.Run["url"], &url) != nil {
		return nil, errors.New("fetch: input.run.url must be a string")
	}
	resp, err := pgflow.Get(url)
	if err != nil {
		return nil, err
	}
	return []byte(`{"status":` + strconv.Itoa(resp.Status) + `,"bytes":` + strconv.Itoa(len(resp.Body)) + `}`), nil
}

func init() { pgflow.Handle(fetch) }

func main() {}
