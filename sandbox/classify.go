package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// classify turns the end of a pgflow_handle or _start call into a Result and a typed error.
// The order matters: a host abort explains a failure better than the engine's view of it,
// and a call that failed after its deadline failed because of the deadline.
func (m *module) classify(ctx context.Context, inst *instance, status uint64, callErr error) outcome {
	st := inst.st
	res := Result{Logs: st.logs, LogsDropped: st.logsDropped}
	fail := func(k Kind, msg string) outcome { return outcome{res: res, err: &Error{Kind: k, Message: msg}} }

	if a := st.abort; a != nil && a.exit && st.command {
		// A command ends with proc_exit: 0 is success, anything else a handler error.
		if a.exitCode != 0 {
			return fail(KindHandlerError, withStderr(fmt.Sprintf("the command exited with code %d", a.exitCode), st))
		}
		callErr = nil
	} else if callErr != nil || st.abort != nil {
		o := m.classifyFailure(ctx, st, inst.g, callErr, "")
		o.res = res
		return o
	}

	if st.command {
		out := bytes.TrimSpace(st.stdout)
		if len(out) == 0 {
			return fail(KindInvalidOutput, withStderr("the command wrote no output JSON to stdout", st))
		}
		if err := checkOutput(out); err != nil {
			return fail(KindInvalidOutput, err.Error())
		}
		res.Output = out
		return outcome{res: res}
	}
	switch uint32(status) {
	case 0:
		if !st.hasOutput {
			return fail(KindProtocolError, "pgflow_handle returned 0 (ok) without calling output_write")
		}
		if err := checkOutput(st.output); err != nil {
			return fail(KindInvalidOutput, err.Error())
		}
		res.Output = st.output
		return outcome{res: res}
	case 1:
		if st.errMsg == "" {
			return fail(KindHandlerError, withGuestOutput("handler error (no message)", st))
		}
		return fail(KindHandlerError, st.errMsg)
	default:
		return fail(KindProtocolError, fmt.Sprintf("pgflow_handle returned status %d; ABI v1 defines 0 (ok) and 1 (handler error)", int32(uint32(status))))
	}
}

// classifyFailure explains a call that did not return normally. during names the phase
// for failures outside the handler call ("instantiating the module", ...).
func (m *module) classifyFailure(ctx context.Context, st *callState, g guestInstance, callErr error, during string) outcome {
	where := ""
	if during != "" {
		where = " while " + during
	}
	res := Result{Logs: st.logs, LogsDropped: st.logsDropped}
	fail := func(k Kind, msg string) outcome { return outcome{res: res, err: &Error{Kind: k, Message: msg}} }

	if a := st.abort; a != nil && !a.exit {
		return fail(a.kind, a.message+where)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && (callErr != nil || st.abort != nil) {
		if errors.Is(ctxErr, context.Canceled) {
			return fail(KindCanceled, "the call was canceled"+where)
		}
		return fail(KindTimeout, timeoutMessage(st.timeout)+where)
	}
	var what string
	switch {
	case st.abort != nil: // proc_exit outside command mode
		what = fmt.Sprintf("the guest called proc_exit(%d)%s; a reactor must return a status from pgflow_handle instead", st.abort.exitCode, where)
	case errors.Is(callErr, errInterrupted):
		return fail(KindTimeout, timeoutMessage(st.timeout)+where)
	default:
		var te *trapError
		if errors.As(callErr, &te) {
			what = "wasm trap: " + te.reason + where
		} else {
			what = fmt.Sprintf("the call failed%s: %v", where, callErr)
		}
	}
	if g != nil && (st.memRefused || g.memoryExhausted()) {
		return fail(KindMemoryLimit, withGuestMessage(fmt.Sprintf("memory limit of %s reached (%s)", bytesize.Text(m.lim.memoryLimit), what), st))
	}
	return fail(KindTrap, withGuestMessage(what, st))
}

func withGuestMessage(what string, st *callState) string {
	if st.errMsg != "" {
		what += ": " + st.errMsg
	}
	return withGuestOutput(what, st)
}

// withGuestOutput appends what the guest printed before it failed, on a "stdout:" and a
// "stderr:" line: TinyGo prints its panics to stdout, Go, Rust and C to stderr.
func withGuestOutput(msg string, st *callState) string {
	return withText(withText(msg, "stdout", &st.stdoutCopy), "stderr", &st.stderr)
}

func withStderr(msg string, st *callState) string { return withText(msg, "stderr", &st.stderr) }

func withText(msg, name string, text *cappedText) string {
	if len(text.buf) == 0 {
		return msg
	}
	return msg + "\n" + name + ": " + strings.TrimRight(text.String(), "\n")
}

// checkOutput enforces the ABI's output rule: one JSON value in valid UTF-8 that
// PostgreSQL's jsonb can store.
func checkOutput(out []byte) error {
	if !utf8.Valid(out) {
		return errors.New("the output is not valid UTF-8")
	}
	if !json.Valid(out) {
		return fmt.Errorf("the output is not valid JSON: %s", jsonError(out))
	}
	if bytes.Contains(out, []byte(`\u0000`)) && hasNULEscape(out) {
		return errors.New(`the output contains \u0000, which PostgreSQL jsonb cannot store`)
	}
	return nil
}

// hasNULEscape finds a real \u0000 escape (not an escaped backslash followed by "u0000").
func hasNULEscape(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 < len(b) && b[i+1] == 'u' && bytes.HasPrefix(b[i+2:], []byte("0000")) {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

func jsonError(b []byte) string {
	var v any
	err := json.Unmarshal(b, &v)
	if err == nil {
		return "unknown error"
	}
	s := err.Error()
	if len(b) > 80 {
		return s + fmt.Sprintf(" (in %d bytes starting %q...)", len(b), b[:60])
	}
	return s + fmt.Sprintf(" (in %q)", b)
}

func timeoutMessage(d time.Duration) string { return fmt.Sprintf("task timed out after %s", d) }
