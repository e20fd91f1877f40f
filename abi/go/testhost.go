//go:build !wasip1

package pgflow

import (
	"errors"
	"strconv"
	"sync"
)

// TestHost stands in for the pgflow-wasm worker in unit tests that run natively (go test):
// Call runs the registered handler the way the worker's pgflow_handle call does (input and
// context lengths in, the bytes copied into buffers the guest made, output or error
// message back) and records what the handler handed to the host. The zero value grants no
// capability, like a step without `http` and `env` keys in flows.yaml.
//
//	func TestHello(t *testing.T) {
//		got := pgflow.Call([]byte(`{"run":{"name":"Ada"}}`), pgflow.TestContext("hello", "hello"))
//		if got.Status != 0 || string(got.Output) != `{"greeting":"Hello, Ada!"}` { t.Fatal(got) }
//	}
type TestHost struct {
	// Config holds the named values the step may read (its flows.yaml `env` list, with
	// the worker's values). A name that is not here is denied, as on the worker.
	Config map[string]string
	// HTTP answers the handler's requests (nil: HTTP is denied, as for a step without an
	// `http` key). Return a *CapError to refuse a request with a code of the ABI; any
	// other error is a network failure (ErrNetwork).
	HTTP func(req Request) (*Response, error)
	// SQL answers the handler's statements (nil: SQL is denied, as for a step without an
	// `sql` key): request is the JSON {"sql": ..., "params": [...]} the handler sent, the
	// answer the result JSON. Return a *CapError to fail a statement with a code of the ABI.
	SQL func(request string) ([]byte, error)

	logs      []LogLine
	response  *Response
	sqlResult []byte
}

// Request is one HTTP request a handler sent through the test host.
type Request struct {
	Method, URL string
	Header      []Header
	Body        []byte
}

// LogLine is one line a handler logged.
type LogLine struct {
	Level   Level
	Message string
}

// Outcome is what one handler call handed back to the host.
type Outcome struct {
	Status int32     // 0: the task completed with Output; 1: it failed with Error
	Output []byte    // the last output written (nil when none)
	Error  string    // the last error message written ("" when none)
	Logs   []LogLine // every log line, in order
}

// Call runs the registered handler once on a zero TestHost (no capabilities).
func Call(input, context []byte) Outcome {
	var h TestHost
	return h.Call(input, context)
}

// Call runs the registered handler once, as the worker runs one task. Calls are
// serialized: the host functions are package-level, as a module's imports are. A panic
// in the handler goes on after its message was recorded, failing the test that called.
func (h *TestHost) Call(input, context []byte) Outcome {
	callMu.Lock()
	defer callMu.Unlock()
	h.logs, h.response, h.sqlResult = nil, nil, nil
	setLastError("")
	activeMu.Lock()
	active = h
	activeMu.Unlock()
	defer func() {
		activeMu.Lock()
		active = nil
		activeMu.Unlock()
	}()

	var out Outcome
	// What pgflow_handle does: buffers of the announced lengths, filled by the host.
	in, ctx := make([]byte, len(input)), make([]byte, len(context))
	copy(in, input)
	copy(ctx, context)
	out.Status = run(in, ctx,
		func(b []byte) { out.Output = append([]byte{}, b...) },
		func(s string) { out.Error = s })
	out.Logs = h.logs
	return out
}

var callMu sync.Mutex

// TestContext is a context JSON like the one the worker gives a task of step in flow:
// first attempt, task 0, fixed ids.
func TestContext(flow, step string) []byte {
	const runID = "00000000-0000-4000-8000-000000000001"
	return []byte(`{"run_id":"` + runID + `","flow_slug":"` + flow + `","step_slug":"` + step +
		`","task_index":0,"attempt":1,"msg_id":1,"flow_input":null,"worker_id":"00000000-0000-4000-8000-000000000002",` +
		`"timeout_ms":60000,"idempotency_key":"` + runID + `:` + step + `:0"}`)
}

func (h *TestHost) request(method, url, header string, body []byte) (int32, string) {
	h.response = nil
	if h.HTTP == nil {
		return ErrDenied, "pgflow test host: HTTP is denied (set TestHost.HTTP, as a step's `http` key in flows.yaml grants it)"
	}
	if method == "" {
		method = "GET"
	}
	resp, err := h.HTTP(Request{Method: method, URL: url, Header: parseHeader(header), Body: append([]byte(nil), body...)})
	var ce *CapError
	switch {
	case errors.As(err, &ce):
		return ce.Code, ce.Message
	case err != nil:
		return ErrNetwork, err.Error()
	case resp == nil:
		return ErrNetwork, "pgflow test host: TestHost.HTTP returned no response and no error"
	case resp.Status < 100 || resp.Status > 599:
		return ErrNetwork, "pgflow test host: TestHost.HTTP returned status " + strconv.Itoa(resp.Status)
	}
	h.response = resp
	return int32(resp.Status), ""
}

func (h *TestHost) config(name string) ([]byte, int32, string) {
	v, ok := h.Config[name]
	if !ok {
		return nil, ErrDenied, "pgflow test host: " + name + " is not in TestHost.Config (a step reads only the names of its `env` list)"
	}
	return []byte(v), 0, ""
}

func (h *TestHost) sql(request string) (int32, string) {
	h.sqlResult = nil
	if h.SQL == nil {
		return ErrDenied, "pgflow test host: SQL is denied (set TestHost.SQL, as a step's `sql` key in flows.yaml grants it)"
	}
	res, err := h.SQL(request)
	var ce *CapError
	switch {
	case errors.As(err, &ce):
		return ce.Code, ce.Message
	case err != nil:
		return ErrSQLFailed, err.Error()
	}
	h.sqlResult = res
	return int32(len(res)), ""
}
