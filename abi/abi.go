// Package abi holds the names and numbers of the pgflow-wasm guest ABI (see SPEC.md).
// The host (package sandbox) validates modules and wires imports with these constants;
// the guest libraries in the language folders beside this file implement the same contract.
package abi

import "encoding/json"

// Version is the ABI version this host speaks; modules export it from pgflow_abi_version.
const Version = 1

// SupportedVersions lists every ABI version the host accepts at load.
var SupportedVersions = []int32{Version}

// Export names a reactor-mode module provides.
const (
	ExportMemory     = "memory"
	ExportABIVersion = "pgflow_abi_version"
	ExportHandle     = "pgflow_handle"
	ExportInitialize = "_initialize"
	ExportStart      = "_start" // command mode: a WASI command with no pgflow_handle
)

// ImportModule is the module name of every host function.
const ImportModule = "pgflow"

// Host function names in ImportModule.
const (
	ImportInputRead   = "input_read"   // (ptr i32)
	ImportContextRead = "context_read" // (ptr i32)
	ImportOutputWrite = "output_write" // (ptr i32, len i32)
	ImportErrorWrite  = "error_write"  // (ptr i32, len i32)
	ImportLog         = "log"          // (level i32, ptr i32, len i32)
)

// ImportParams gives the number of i32 parameters of each host function; none returns a value.
var ImportParams = map[string]int{
	ImportInputRead:   1,
	ImportContextRead: 1,
	ImportOutputWrite: 2,
	ImportErrorWrite:  2,
	ImportLog:         3,
}

// WASIModule is the only other import module a guest may use (with everything denied).
const WASIModule = "wasi_snapshot_preview1"

// Status codes returned by pgflow_handle.
const (
	StatusOK           = 0
	StatusHandlerError = 1
)

// Log levels passed to the log import.
const (
	LogDebug = 0
	LogInfo  = 1
	LogWarn  = 2
	LogError = 3
)

// Context JSON field names (see SPEC.md "The context JSON").
const (
	CtxRunID     = "run_id"
	CtxFlowSlug  = "flow_slug"
	CtxStepSlug  = "step_slug"
	CtxTaskIndex = "task_index"
	CtxAttempt   = "attempt"
	CtxMsgID     = "msg_id"
	CtxFlowInput = "flow_input"
	// CtxFlowInputOmitted and CtxFlowInputBytes replace flow_input (then null) when the run's
	// input is larger than MaxContextFlowInput.
	CtxFlowInputOmitted = "flow_input_omitted"
	CtxFlowInputBytes   = "flow_input_bytes"
	CtxWorkerID         = "worker_id"
	CtxTimeoutMS        = "timeout_ms"
)

// MaxContextFlowInput is the largest run input the context carries (64 KiB).
const MaxContextFlowInput = 64 << 10

// Context is the context JSON object the host passes to every task.
type Context struct {
	RunID     string `json:"run_id"`
	FlowSlug  string `json:"flow_slug"`
	StepSlug  string `json:"step_slug"`
	TaskIndex int    `json:"task_index"`
	Attempt   int    `json:"attempt"`
	MsgID     int64  `json:"msg_id"`
	// FlowInput is kept raw so the host passes the run input through byte for byte.
	FlowInput json.RawMessage `json:"flow_input"`
	WorkerID  string          `json:"worker_id"`
	TimeoutMS int64           `json:"timeout_ms"`
	// FlowInputOmitted is true (and FlowInput null) when the input was over MaxContextFlowInput.
	FlowInputOmitted bool `json:"flow_input_omitted,omitempty"`
	FlowInputBytes   int  `json:"flow_input_bytes,omitempty"`
}
