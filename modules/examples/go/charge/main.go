//go:build wasip1

// charge: charges a customer through a payments API, once, however often pgflow retries.
// The complete example of docs/guests.md.
//
// Input {"run": {"amount": 1200, "currency": "eur", "customer": "cus_42"}} becomes
// POST $PAYMENTS_URL/charges with the bearer token $PAYMENTS_TOKEN and the task's
// idempotency key; the output is {"charge_id": "...", "status": "..."}, or
// {"declined": true, "http_status": 402} when the API refuses the charge. A server error
// fails the task, and pgflow retries it with the same key. The step in flows.yaml:
//
//	steps:
//	  - slug: charge
//	    module: modules/examples/tinygo/charge.wasm
//	    http:
//	      allow: ["api.payments.example"]
//	    env: [PAYMENTS_URL, PAYMENTS_TOKEN]
package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
)

type order struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
}

func charge(input, context []byte) ([]byte, error) {
	var in struct {
		Run order `json:"run"`
	}
	if json.Unmarshal(input, &in) != nil || in.Run.Amount <= 0 || in.Run.Currency == "" {
		return nil, errors.New("charge: input.run needs an amount above 0 and a currency")
	}
	var ctx struct {
		IdempotencyKey string `json:"idempotency_key"`
	}
	if err := json.Unmarshal(context, &ctx); err != nil {
		return nil, err
	}
	// Named values from the worker's environment, granted by the step's env list. Never
	// log the token or put it in an output: nothing else would show it.
	base, err := pgflow.Config("PAYMENTS_URL")
	if err != nil {
		return nil, err
	}
	token, err := pgflow.Config("PAYMENTS_TOKEN")
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(in.Run)
	if err != nil {
		return nil, err
	}
	resp, err := pgflow.HTTP("POST", strings.TrimSuffix(base, "/")+"/charges", []pgflow.Header{
		{Name: "Authorization", Value: "Bearer " + token},
		{Name: "Content-Type", Value: "application/json"},
		// The same on every attempt of this task: the API charges once.
		{Name: "Idempotency-Key", Value: ctx.IdempotencyKey},
	}, body)
	if err != nil {
		return nil, err // refused by the step's http section, or the network failed
	}
	switch {
	case resp.Status >= 500:
		return nil, errors.New("charge: the payments API answered " + strconv.Itoa(resp.Status) + "; pgflow retries the task")
	case resp.Status >= 400:
		return []byte(`{"declined":true,"http_status":` + strconv.Itoa(resp.Status) + `}`), nil
	}
	var out struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(resp.Body, &out); err != nil || out.ID == "" {
		return nil, errors.New("charge: the payments API answered without a charge id")
	}
	return json.Marshal(map[string]string{"charge_id": out.ID, "status": out.Status})
}

func init() { pgflow.Handle(charge) }

func main() {}
