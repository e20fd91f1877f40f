package step

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
)

// The hand-built context JSON must say exactly what encoding/json would.
func TestTaskContextMatchesEncodingJSON(t *testing.T) {
	const workerID, timeout = "6f1c2a9e-8b1d-4c3e-9f00-1234567890ab", 1500 * time.Millisecond
	shape := Shape(&flowfile.Step{Type: flowfile.StepMap, DependsOn: []string{"a", "b\"c"}})
	for _, task := range []fetched.Task{
		{RunID: "0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b", FlowSlug: "orders", StepSlug: "price", TaskIndex: 7, Attempt: 2, MsgID: 1 << 40,
			FlowInput: json.RawMessage(`[{"a": [1, 2.5, "x\"y"]}, null, "é"]`)},
		{RunID: "r", FlowSlug: "f", StepSlug: "odd\"slug\\é\n", FlowInput: nil},
		{RunID: "big", FlowSlug: "f", StepSlug: "s", FlowInput: json.RawMessage(`"` + strings.Repeat("x", abi.MaxContextFlowInput) + `"`)},
	} {
		got, err := Context(task, workerID, timeout, shape, "0.14")
		if err != nil {
			t.Fatal(err)
		}
		flowInput := task.FlowInput
		want := abi.Context{RunID: task.RunID, FlowSlug: task.FlowSlug, StepSlug: task.StepSlug, TaskIndex: task.TaskIndex,
			Attempt: task.Attempt, MsgID: task.MsgID, WorkerID: workerID, TimeoutMS: 1500,
			IdempotencyKey: task.RunID + ":" + task.StepSlug + ":" + strconv.Itoa(task.TaskIndex),
			PgflowVersion:  "0.14", StepType: "map", DependsOn: []string{"a", "b\"c"}}
		switch {
		case flowInput == nil:
			flowInput = json.RawMessage("null")
		case len(flowInput) > abi.MaxContextFlowInput:
			want.FlowInputOmitted, want.FlowInputBytes = true, len(flowInput)
			flowInput = json.RawMessage("null")
		}
		want.FlowInput = flowInput
		var back abi.Context
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("context %s is not JSON: %v", got, err)
		}
		var gotInput, wantInput any
		_ = json.Unmarshal(back.FlowInput, &gotInput)
		_ = json.Unmarshal(want.FlowInput, &wantInput)
		back.FlowInput, want.FlowInput = nil, nil
		if !reflect.DeepEqual(back, want) || !reflect.DeepEqual(gotInput, wantInput) {
			t.Errorf("context %s\ndecodes to %+v %v\nwant       %+v %v", got, back, gotInput, want, wantInput)
		}
	}
}
