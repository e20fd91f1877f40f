//go:build wasip1

// ledger: {"run": {"amount": 5}} -> {"inserted": 1, "total": 5}
//
// Inserts (run_id, task_index, amount) into the application's table app.ledger as the
// step's role (its sql section in flows.yaml), then reads back the total of the run's rows.
// In a transactional step the row commits together with pgflow's completion of the task:
// a retried or crashed task never inserts it twice. The step in flows.yaml:
//
//	steps:
//	  - slug: record
//	    module: modules/examples/tinygo/ledger.wasm
//	    sql:
//	      role: ledger_writer
package main

import (
	"encoding/json"
	"errors"

	pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
)

// result is the shape of pgflow.SQL's result.
type result struct {
	Columns  []string            `json:"columns"`
	Rows     [][]json.RawMessage `json:"rows"`
	RowCount int64               `json:"row_count"`
	Command  string              `json:"command"`
}

func query(sql string, params ...any) (*result, error) {
	b, err := pgflow.SQL(sql, params...)
	if err != nil {
		return nil, err // refused by the filter or the role's grants, or failed: the message says which
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func ledger(input, context []byte) ([]byte, error) {
	var in struct {
		Run struct {
			Amount *int64 `json:"amount"`
		} `json:"run"`
	}
	if json.Unmarshal(input, &in) != nil || in.Run.Amount == nil {
		return nil, errors.New("ledger: input.run.amount must be a whole number")
	}
	var ctx struct {
		RunID     string `json:"run_id"`
		TaskIndex int    `json:"task_index"`
	}
	if err := json.Unmarshal(context, &ctx); err != nil {
		return nil, err
	}
	ins, err := query("insert into app.ledger (run_id, task_index, amount) values ($1, $2, $3)", ctx.RunID, ctx.TaskIndex, *in.Run.Amount)
	if err != nil {
		return nil, err
	}
	sum, err := query("select coalesce(sum(amount), 0) as total from app.ledger where run_id = $1", ctx.RunID)
	if err != nil {
		return nil, err
	}
	if len(sum.Rows) != 1 || len(sum.Rows[0]) != 1 {
		return nil, errors.New("ledger: the total came back without a row")
	}
	return json.Marshal(map[string]any{"inserted": ins.RowCount, "total": sum.Rows[0][0]})
}

func init() { pgflow.Handle(ledger) }

func main() {}
