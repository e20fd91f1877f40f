// Package abi holds the names and numbers of the pgflow-wasm guest ABI (see SPEC.md).
// The host (package sandbox) validates modules and wires imports with these constants;
// the guest libraries in the language folders beside this file implement the same contract.
package abi

import (
	"encoding/json"
	"strconv"
)

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

	// Capabilities (optional imports, granted per step in flows.yaml; see SPEC.md).

	// (method_ptr, method_len, url_ptr, url_len, headers_ptr, headers_len, body_ptr, body_len i32) -> i32:
	// an HTTP status (100-599), or an error code below zero.
	ImportHTTPRequest = "http_request"
	// (part, ptr, cap i32) -> i32: copies up to cap bytes of a part of the last response,
	// returns the part's whole length.
	ImportHTTPResponseRead = "http_response_read"
	// (method_ptr, method_len, url_ptr, url_len, headers_ptr, headers_len, body_ptr, body_len,
	// wait_ms i32) -> i32: sends one request as http_request does, but waits at most wait_ms
	// for it (a negative wait_ms: until it ends): an HTTP status, an error code below zero, or
	// HTTPPending while the request goes on (then http_wait). One request runs at a time.
	ImportHTTPStart = "http_start"
	// (wait_ms, cancel i32) -> i32: with cancel 0, waits at most wait_ms more for the request
	// http_start left running: as http_start returns. With cancel 1, stops it, closes its
	// connection and returns ErrCanceled.
	ImportHTTPWait = "http_wait"
	// (name_ptr, name_len, ptr, cap i32) -> i32: copies up to cap bytes of a named value,
	// returns its whole length, or an error code below zero.
	ImportConfigGet = "config_get"
	// (ptr, cap i32) -> i32: copies up to cap bytes of the message of the last call that
	// returned an error code, returns its whole length.
	ImportLastError = "last_error"
	// (request_ptr, request_len i32) -> i32: runs one SQL statement, the request being the
	// JSON {"sql": "...", "params": [...]}; returns the result JSON's length, or an error
	// code below zero.
	ImportSQLQuery = "sql_query"
	// (ptr, cap i32) -> i32: copies up to cap bytes of the last sql_query's result JSON,
	// returns its whole length.
	ImportSQLResultRead = "sql_result_read"
	// (request_ptr, request_len i32) -> i32: one computation done by the host for the
	// JavaScript engine's web platform (Web Crypto: digest, HMAC, RSA, ECDSA and Ed25519
	// signatures, AES-GCM, HKDF, PBKDF2, key import and export; IDNA host names), the request
	// and the answer being JSON with bytes in base64; returns the answer's length, or
	// ErrBadRequest with last_error naming the DOMException ("DataError: ..."). Granted to every
	// step: it computes and reaches nothing (no file, no network).
	ImportComputeCall = "compute_call"
	// (ptr, cap i32) -> i32: copies up to cap bytes of the last compute_call's answer, returns
	// its whole length.
	ImportComputeResultRead = "compute_result_read"
)

// ImportParams gives the number of i32 parameters of each host function.
var ImportParams = map[string]int{
	ImportInputRead:         1,
	ImportContextRead:       1,
	ImportOutputWrite:       2,
	ImportErrorWrite:        2,
	ImportLog:               3,
	ImportHTTPRequest:       8,
	ImportHTTPResponseRead:  3,
	ImportHTTPStart:         9,
	ImportHTTPWait:          2,
	ImportConfigGet:         4,
	ImportLastError:         2,
	ImportSQLQuery:          2,
	ImportSQLResultRead:     2,
	ImportComputeCall:       2,
	ImportComputeResultRead: 2,
}

// ImportResults gives the number of i32 results of each host function (0 when absent).
var ImportResults = map[string]int{
	ImportHTTPRequest:       1,
	ImportHTTPResponseRead:  1,
	ImportHTTPStart:         1,
	ImportHTTPWait:          1,
	ImportConfigGet:         1,
	ImportLastError:         1,
	ImportSQLQuery:          1,
	ImportSQLResultRead:     1,
	ImportComputeCall:       1,
	ImportComputeResultRead: 1,
}

// Parts of a response, the first argument of http_response_read.
const (
	HTTPPartHeaders = 0 // "Name: value\n" lines, names in canonical form, sorted
	HTTPPartBody    = 1
)

// HTTPPending is what http_start and http_wait return while the request still runs.
const HTTPPending = 0

// Error codes: http_request, http_start, http_wait, config_get and sql_query return them (below zero) instead of a status or
// a length; last_error then holds a message that says what happened and what to change.
// A call never traps for want of permission.
const (
	ErrDenied           = -1  // the step has no such capability: no `http` or `sql` key, or the name is not in its `env` list
	ErrHostNotAllowed   = -2  // the URL's host and port (or a redirect's) match no http.allow entry
	ErrAddressRefused   = -3  // the host is or resolves to a loopback, private, link-local, metadata or other special address that no http.allow entry names literally
	ErrTooManyRequests  = -4  // more requests than http.max_requests in this task (redirect hops count)
	ErrResponseTooLarge = -5  // the response body is over http.max_response_bytes
	ErrRequestTooLarge  = -6  // the request body is over http.max_request_bytes, or its headers over 64 KiB; an SQL request over 8 MiB
	ErrBadRequest       = -7  // an invalid method, URL, scheme or header; an SQL request that is not {"sql": ..., "params": [...]}
	ErrNetwork          = -8  // the name did not resolve, the connection or TLS failed, the server broke the protocol
	ErrTooManyRedirects = -9  // more than MaxRedirects redirects
	ErrNotSet           = -10 // config_get: the name is in the step's env list but not set in the worker's environment
	ErrSQLRefused       = -11 // sql_query: the statement filter refused the statement (not a row statement, a second statement, a refused function)
	ErrSQLFailed        = -12 // sql_query: PostgreSQL raised an error (last_error names its SQLSTATE), or could not be reached
	ErrCanceled         = -13 // http_wait with cancel: the guest stopped its request (an AbortSignal in JavaScript)
)

// MaxRedirects is how many redirects one http_request follows.
const MaxRedirects = 10

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
	// CtxIdempotencyKey is the same for every attempt of one task: "<run_id>:<step_slug>:<task_index>".
	CtxIdempotencyKey = "idempotency_key"
	// CtxPgflowVersion names the pgflow the database speaks ("0.8", "0.12", ...: the oldest
	// release with its catalogue), CtxStepType the step's type ("single" or "map") and
	// CtxDependsOn its dependencies: what a guest needs to give a handler pgflow's own input
	// shape of that release (the JavaScript handlers do).
	CtxPgflowVersion = "pgflow_version"
	CtxStepType      = "step_type"
	CtxDependsOn     = "depends_on"
)

// IdempotencyKey is the context's idempotency_key of a task.
func IdempotencyKey(runID, stepSlug string, taskIndex int) string {
	return runID + ":" + stepSlug + ":" + strconv.Itoa(taskIndex)
}

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
	// IdempotencyKey names the task, not the attempt: send it to APIs that deduplicate.
	IdempotencyKey string `json:"idempotency_key"`
	// FlowInputOmitted is true (and FlowInput null) when the input was over MaxContextFlowInput.
	FlowInputOmitted bool `json:"flow_input_omitted,omitempty"`
	FlowInputBytes   int  `json:"flow_input_bytes,omitempty"`
	// PgflowVersion is empty when the host does not know it.
	PgflowVersion string   `json:"pgflow_version,omitempty"`
	StepType      string   `json:"step_type"`
	DependsOn     []string `json:"depends_on"`
}
