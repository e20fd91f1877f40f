package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/compute"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/sqlcap"
)

// Capabilities are what a step's handler may do besides computing: send HTTP requests
// and read named values. The zero value grants nothing: every http_request and config_get
// then returns abi.ErrDenied with a message that says which flows.yaml key grants it.
type Capabilities struct {
	// Step names the step in messages: `step "charge" of flow "orders" (flows.yaml:12)`.
	Step string
	// HTTP is the step's http section; nil refuses every request.
	HTTP *httpcap.Policy
	// Env holds the values config_get may return.
	Env Env
	// Observer receives requests, bytes and denials for metrics; optional.
	Observer httpcap.Observer
}

func (c *Capabilities) step() string {
	if c.Step != "" {
		return c.Step
	}
	return "this step"
}

// Env is the named values one step may read with config_get: the names of its `env` list,
// each with the worker's value or none. String, GoString, Format and LogValue show names
// only, so printing an Env (or a struct holding one) never shows a value.
type Env struct {
	names  []string
	values map[string]string // only the names that are set
}

// NewEnv looks names up once (the worker passes os.LookupEnv).
func NewEnv(names []string, lookup func(string) (string, bool)) Env {
	e := Env{values: map[string]string{}}
	for _, n := range names {
		if slices.Contains(e.names, n) {
			continue
		}
		e.names = append(e.names, n)
		if v, ok := lookup(n); ok {
			e.values[n] = v
		}
	}
	return e
}

// Names are the listed names, in order.
func (e Env) Names() []string { return slices.Clone(e.names) }

// Unset are the listed names the lookup did not find.
func (e Env) Unset() []string {
	var out []string
	for _, n := range e.names {
		if _, ok := e.values[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

func (e Env) String() string {
	parts := make([]string, len(e.names))
	for i, n := range e.names {
		parts[i] = n
		if _, ok := e.values[n]; !ok {
			parts[i] += " (unset)"
		}
	}
	return "env[" + strings.Join(parts, " ") + "]"
}

// GoString keeps %#v from printing the values.
func (e Env) GoString() string { return e.String() }

// Format prints String for every verb, so %v, %+v and %#v of any struct holding an Env
// show names only.
func (e Env) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(e.String())) }

// LogValue shows names only in slog lines.
func (e Env) LogValue() slog.Value { return slog.StringValue(e.String()) }

// envNameRE is what config_get repeats back in a message: a real variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// capabilityFuncs are the optional ABI v1 imports of capabilities (abi/SPEC.md).
func capabilityFuncs() []hostFunc {
	f := func(name string, fn func(s *callState, mem []byte, a []uint64) (uint64, error)) hostFunc {
		return hostFunc{module: abi.ImportModule, name: name, needsMemory: true,
			sig: wasmfile.FuncType{Params: i32s(abi.ImportParams[name]), Results: i32s(abi.ImportResults[name])}, fn: fn}
	}
	return []hostFunc{
		f(abi.ImportHTTPRequest, (*callState).httpRequest),
		f(abi.ImportHTTPStart, (*callState).httpStart),
		f(abi.ImportHTTPWait, (*callState).httpWait),
		f(abi.ImportHTTPResponseRead, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			var part []byte
			switch int32(uint32(a[0])) {
			case abi.HTTPPartHeaders:
				part = s.respHeader
			case abi.HTTPPartBody:
				part = s.respBody
			default:
				return 0, s.protocolError("%s: part %d does not exist: 0 is the headers, 1 the body", abi.ImportHTTPResponseRead, int32(uint32(a[0])))
			}
			return s.copyOut(mem, abi.ImportHTTPResponseRead, part, a[1], a[2])
		}),
		f(abi.ImportConfigGet, (*callState).configGet),
		f(abi.ImportLastError, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			return s.copyOut(mem, abi.ImportLastError, []byte(s.lastErr), a[0], a[1])
		}),
		f(abi.ImportSQLQuery, (*callState).sqlQuery),
		f(abi.ImportSQLResultRead, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			return s.copyOut(mem, abi.ImportSQLResultRead, s.sqlResult, a[0], a[1])
		}),
		f(abi.ImportComputeCall, (*callState).computeCall),
		f(abi.ImportComputeResultRead, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			return s.copyOut(mem, abi.ImportComputeResultRead, s.computeResult, a[0], a[1])
		}),
	}
}

// computeCall does one computation for the guest (sandbox/compute: Web Crypto, IDNA): no
// grant is needed, as it reads nothing and sends nothing.
func (s *callState) computeCall(mem []byte, a []uint64) (uint64, error) {
	ptr, n := uint64(uint32(a[0])), uint64(uint32(a[1]))
	b, ok := span(mem, ptr, n)
	if !ok {
		return 0, s.badPointer(mem, abi.ImportComputeCall, ptr, n)
	}
	s.computeResult = nil
	out, err := compute.Call(b)
	if err != nil {
		return s.refuse(abi.ErrBadRequest, err.Error())
	}
	s.computeResult = out
	return uint64(len(out)), nil
}

func (s *callState) sqlQuery(mem []byte, a []uint64) (uint64, error) {
	ptr, n := uint64(uint32(a[0])), uint64(uint32(a[1]))
	b, ok := span(mem, ptr, n)
	if !ok {
		return 0, s.badPointer(mem, abi.ImportSQLQuery, ptr, n)
	}
	s.sqlResult = nil
	if s.sql == nil {
		e := sqlcap.Denied(s.capsStep())
		return s.refuse(e.Code, e.Message)
	}
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	// The session copies what it keeps: b is guest memory, valid only during this call.
	res, err := s.sql.Query(ctx, b)
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(ctxErr, context.Canceled) {
			return 0, s.fail(&hostAbort{kind: KindCanceled, message: "the call was canceled during an SQL statement"})
		}
		return 0, s.fail(&hostAbort{kind: KindTimeout, message: timeoutMessage(s.timeout) + " while waiting for an SQL statement"})
	}
	var e *sqlcap.Error
	switch {
	case errors.As(err, &e):
		return s.refuse(e.Code, e.Message)
	case err != nil:
		return 0, s.fail(&hostAbort{kind: KindSQL, message: err.Error()})
	case len(res) > math.MaxInt32:
		return 0, s.fail(&hostAbort{kind: KindSQL, message: "sql: the result is over 2 GiB"})
	}
	s.sqlResult = res
	return uint64(len(res)), nil
}

// result encodes a negative error code as the i32 a guest reads.
func result(code int32) uint64 { return uint64(uint32(code)) }

// copyOut copies up to cap bytes of data to ptr and returns len(data): a guest asks with
// cap 0 for the length, then again with a buffer that large.
func (s *callState) copyOut(mem []byte, name string, data []byte, ptr, capacity uint64) (uint64, error) {
	ptr, capacity = uint64(uint32(ptr)), uint64(uint32(capacity))
	n := min(uint64(len(data)), capacity)
	dst, ok := span(mem, ptr, n)
	if !ok {
		return 0, s.badPointer(mem, name, ptr, n)
	}
	copy(dst, data)
	return uint64(len(data)), nil
}

// refuse records the message of an error code for last_error and returns the code.
func (s *callState) refuse(code int32, msg string) (uint64, error) {
	s.lastErr = msg
	return result(code), nil
}

// httpSession reads a request's four parts (method, URL, headers, body) from guest memory
// and returns the task's session, or what the call returns when the step has no grant.
func (s *callState) httpSession(mem []byte, name string, a []uint64) (*httpcap.Session, httpcap.Request, uint64, error) {
	var parts [4][]byte
	for i := range parts {
		ptr, n := uint64(uint32(a[2*i])), uint64(uint32(a[2*i+1]))
		b, ok := span(mem, ptr, n)
		if !ok {
			return nil, httpcap.Request{}, 0, s.badPointer(mem, name, ptr, n)
		}
		parts[i] = b
	}
	s.respHeader, s.respBody = nil, nil
	caps := s.caps
	if caps == nil || caps.HTTP == nil {
		e := httpcap.Denied(s.capsStep())
		if caps != nil && caps.Observer != nil {
			caps.Observer.Denied(e.Reason)
		}
		rc, err := s.refuse(e.Code, e.Message)
		return nil, httpcap.Request{}, rc, err
	}
	if s.http == nil {
		s.http = caps.HTTP.NewSession(caps.step(), caps.Observer)
	}
	// Method, URL and headers become Go strings (copies); the session copies the body.
	return s.http, httpcap.Request{Method: string(parts[0]), URL: string(parts[1]), Header: parts[2], Body: parts[3]}, 0, nil
}

func (s *callState) taskContext() context.Context {
	if s.ctx == nil {
		return context.Background()
	}
	return s.ctx
}

// httpEnded stops the guest when the task is over: rather than hand it an error it could
// mistake for a failed request.
func (s *callState) httpEnded(ctx context.Context) error {
	ctxErr := ctx.Err()
	if ctxErr == nil {
		return nil
	}
	if errors.Is(ctxErr, context.Canceled) {
		return s.fail(&hostAbort{kind: KindCanceled, message: "the call was canceled during an HTTP request"})
	}
	return s.fail(&hostAbort{kind: KindTimeout, message: timeoutMessage(s.timeout) + " while waiting for an HTTP response"})
}

// httpResult is what a request's call returns: its status, with the response kept for
// http_response_read, or its error code.
func (s *callState) httpResult(resp *httpcap.Response, err *httpcap.Error) (uint64, error) {
	if err != nil {
		return s.refuse(err.Code, err.Message)
	}
	s.respHeader, s.respBody = resp.Header, resp.Body
	return uint64(resp.Status), nil
}

func (s *callState) httpRequest(mem []byte, a []uint64) (uint64, error) {
	session, req, rc, err := s.httpSession(mem, abi.ImportHTTPRequest, a)
	if session == nil {
		return rc, err
	}
	ctx := s.taskContext()
	resp, e := session.Do(ctx, req)
	if err := s.httpEnded(ctx); err != nil {
		return 0, err
	}
	return s.httpResult(resp, e)
}

// httpStart sends a request in the background and waits for it up to its last argument's
// milliseconds: the JavaScript engine fires its timers meanwhile, so an AbortSignal can stop
// a request that hangs.
func (s *callState) httpStart(mem []byte, a []uint64) (uint64, error) {
	session, req, rc, err := s.httpSession(mem, abi.ImportHTTPStart, a)
	if session == nil {
		return rc, err
	}
	call, e := session.Start(s.taskContext(), req)
	if e != nil {
		return s.refuse(e.Code, e.Message)
	}
	s.httpCall = call
	return s.httpAwait(int32(uint32(a[8])))
}

func (s *callState) httpWait(_ []byte, a []uint64) (uint64, error) {
	s.respHeader, s.respBody = nil, nil
	if s.httpCall == nil {
		return s.refuse(abi.ErrBadRequest, "http: "+abi.ImportHTTPWait+": no request is running in this task (http_start sends one)")
	}
	if uint32(a[1]) != 0 {
		s.httpCall.Cancel()
		s.httpCall = nil
		return s.refuse(abi.ErrCanceled, "http: the handler canceled its request")
	}
	return s.httpAwait(int32(uint32(a[0])))
}

// httpAwait waits up to ms milliseconds (ms < 0: until it ends) for the running request.
func (s *callState) httpAwait(ms int32) (uint64, error) {
	ctx := s.taskContext()
	d := time.Duration(-1)
	if ms >= 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	done := s.httpCall.Wait(ctx, d)
	if err := s.httpEnded(ctx); err != nil {
		s.httpCall.Cancel()
		s.httpCall = nil
		return 0, err
	}
	if !done {
		if s.fixedClock {
			// The fixed clock moves only when the guest waits: it waited d.
			s.clockNanos += uint64(d)
		}
		return result(abi.HTTPPending), nil
	}
	call := s.httpCall
	s.httpCall = nil
	return s.httpResult(call.Result())
}

func (s *callState) configGet(mem []byte, a []uint64) (uint64, error) {
	ptr, n := uint64(uint32(a[0])), uint64(uint32(a[1]))
	b, ok := span(mem, ptr, n)
	if !ok {
		return 0, s.badPointer(mem, abi.ImportConfigGet, ptr, n)
	}
	name := string(b)
	shown := "this name"
	if envNameRE.MatchString(name) {
		shown = fmt.Sprintf("%q", name)
	}
	var env Env
	if s.caps != nil {
		env = s.caps.Env
	}
	if !slices.Contains(env.names, name) {
		return s.refuse(abi.ErrDenied, fmt.Sprintf("config: %s may not read %s: add it to the step's `env` list in flows.yaml", s.capsStep(), shown))
	}
	v, set := env.values[name]
	if !set {
		return s.refuse(abi.ErrNotSet, fmt.Sprintf("config: %s is in the `env` list of %s but not set in the worker's environment", shown, s.capsStep()))
	}
	return s.copyOut(mem, abi.ImportConfigGet, []byte(v), a[2], a[3])
}

func (s *callState) capsStep() string {
	if s.caps == nil {
		return "this step"
	}
	return s.caps.step()
}
