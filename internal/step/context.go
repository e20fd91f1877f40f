package step

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
)

// Context builds the context JSON of ABI v1 (replay builds the same one) by appending, not encoding/json: the flow
// input is copied as it came from PostgreSQL's jsonb output, which is valid JSON, instead of
// being validated and compacted again for every task. An input over 64 KiB is left out (a
// map over a large array would copy the whole array into every task). timeout is the
// step's, shape its Shape, version the pgflow the database speaks
// (schema.Protocol.Version).
func Context(t fetched.Task, workerID string, timeout time.Duration, shape []byte, version string) ([]byte, error) {
	flowInput := t.FlowInput
	omitted := len(flowInput) > abi.MaxContextFlowInput
	if len(flowInput) == 0 || omitted {
		flowInput = json.RawMessage("null")
	}
	b := make([]byte, 0, 300+2*len(t.RunID)+len(t.FlowSlug)+2*len(t.StepSlug)+len(flowInput))
	b = append(b, `{"`+abi.CtxRunID+`":`...)
	b = appendJSONString(b, t.RunID)
	b = append(b, `,"`+abi.CtxFlowSlug+`":`...)
	b = appendJSONString(b, t.FlowSlug)
	b = append(b, `,"`+abi.CtxStepSlug+`":`...)
	b = appendJSONString(b, t.StepSlug)
	b = append(b, `,"`+abi.CtxTaskIndex+`":`...)
	b = strconv.AppendInt(b, int64(t.TaskIndex), 10)
	b = append(b, `,"`+abi.CtxAttempt+`":`...)
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	b = append(b, `,"`+abi.CtxMsgID+`":`...)
	b = strconv.AppendInt(b, t.MsgID, 10)
	b = append(b, `,"`+abi.CtxFlowInput+`":`...)
	b = append(b, flowInput...)
	if omitted {
		b = append(b, `,"`+abi.CtxFlowInputOmitted+`":true,"`+abi.CtxFlowInputBytes+`":`...)
		b = strconv.AppendInt(b, int64(len(t.FlowInput)), 10)
	}
	b = append(b, `,"`+abi.CtxWorkerID+`":`...)
	b = appendJSONString(b, workerID)
	b = append(b, `,"`+abi.CtxTimeoutMS+`":`...)
	b = strconv.AppendInt(b, timeout.Milliseconds(), 10)
	b = append(b, `,"`+abi.CtxIdempotencyKey+`":`...)
	b = appendJSONString(b, abi.IdempotencyKey(t.RunID, t.StepSlug, t.TaskIndex))
	if version != "" {
		b = append(b, `,"`+abi.CtxPgflowVersion+`":`...)
		b = appendJSONString(b, version)
	}
	b = append(b, shape...)
	return append(b, '}'), nil
}

// Shape is the context's step_type and depends_on members of a step, made once.
func Shape(s *flowfile.Step) []byte {
	b := []byte(`,"` + abi.CtxStepType + `":`)
	b = appendJSONString(b, s.Type)
	b = append(b, `,"`+abi.CtxDependsOn+`":[`...)
	for i, d := range s.DependsOn {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, d)
	}
	return append(b, ']')
}

// Seed is the identity a deterministic step's random bytes are drawn from: the run,
// the step and the task index (not the attempt: a retry draws what the first try drew).
func Seed(t *fetched.Task) []byte {
	return []byte(t.RunID + "/" + t.FlowSlug + "/" + t.StepSlug + "/" + strconv.Itoa(t.TaskIndex))
}

// appendJSONString appends s as a JSON string. Slugs, uuids and worker ids need no escapes,
// so the common case is a plain copy; anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
