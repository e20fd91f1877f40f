package sandbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/sqlcap"
)

// limits are the caps one module runs under: the engine's Config with defaults applied and
// the step's memory limit.
type limits struct {
	maxOutput   int
	maxError    int
	maxLog      int
	memoryLimit uint64 // bytes, a whole number of pages
	fuel        int64  // units of work per task; 0: unlimited
}

// hostAbort is why a host function stopped the guest: proc_exit, a protocol violation or
// an output over the cap. The first abort of a call wins.
type hostAbort struct {
	kind     Kind
	message  string
	exit     bool // proc_exit was called
	exitCode uint32
}

func (a *hostAbort) Error() string { return a.message }

// callState is everything the host functions of one instance read and write. A fresh
// instance gets a fresh state; a reused instance keeps its clock and resets the rest
// with beginTask.
type callState struct {
	lim     *limits
	caps    *Capabilities // the step's grants; nil grants nothing
	command bool

	// Per task.
	timeout        time.Duration // for messages
	input, context []byte
	stdin          []byte
	stdinPos       int
	output         []byte
	hasOutput      bool
	errMsg         string
	stdout         []byte     // command mode: the output
	stdoutCopy     cappedText // both modes: the start of stdout, for the message of a failure
	stderr         cappedText
	logs           []LogLine
	logBytes       int
	logsDropped    int
	abort          *hostAbort
	memRefused     bool   // a memory.grow past the memory limit was refused during this task
	seed           []byte // the task's random seed (Task.Seed); nil: unpredictable bytes
	fixedClock     bool   // the fake clocks (Task.FixedClock); false: the host's

	// Work metering (wazero's instrumentation; wasmtime counts fuel natively), per task.
	fuelLimit  int64 // units of work the task may use; 0: unlimited
	fuelUsed   int64 // units used before the current slice
	sliceStart int64 // the counter's value when the current slice began
	lastYield  time.Time

	// Capabilities, per task.
	ctx           context.Context  // the task's: its deadline ends HTTP requests
	http          *httpcap.Session // created by the first http_request or http_start
	httpCall      *httpcap.Call    // the request http_start left running, until it ends
	respHeader    []byte           // the last response, for http_response_read
	respBody      []byte
	lastErr       string         // the message of the last error code, for last_error
	sql           sqlcap.Session // the task's (Task.SQL); nil denies sql_query
	sqlResult     []byte         // the last sql_query's result, for sql_result_read
	computeResult []byte         // the last compute_call's answer, for compute_result_read

	// Per instance.
	clockNanos uint64 // the fake clock (fixedClock): advances 1 ms per read and by every sleep
	rng        *rand.ChaCha8
	closedFD   [3]bool
}

func newCallState(lim *limits, caps *Capabilities, command bool) *callState {
	return &callState{lim: lim, caps: caps, command: command,
		stdoutCopy: cappedText{max: lim.maxError}, stderr: cappedText{max: lim.maxError}}
}

// beginTask loads a task's data and clears what the previous task left behind.
func (s *callState) beginTask(ctx context.Context, input, context []byte, timeout time.Duration) {
	s.ctx, s.input, s.context, s.timeout = ctx, input, context, timeout
	s.fuelUsed, s.sliceStart, s.fuelLimit = 0, 0, s.lim.fuel
	s.rng, s.seed = nil, nil // each task draws its own stream (see randomGet)
	s.stdin, s.stdinPos = nil, 0
	if s.command {
		s.stdin = commandEnvelope(input, context)
	}
	s.output, s.hasOutput, s.errMsg, s.stdout = nil, false, "", nil
	s.stdoutCopy.reset()
	s.stderr.reset()
	s.logs, s.logBytes, s.logsDropped = nil, 0, 0
	s.abort, s.memRefused = nil, false
	s.respHeader, s.respBody, s.lastErr = nil, nil, ""
	s.sql, s.sqlResult, s.computeResult = nil, nil, nil
}

// endTask releases what the task held outside the guest: its HTTP connections.
func (s *callState) endTask() {
	if s.http != nil {
		s.http.Close() // cancels a request still running, and waits for it
		s.http = nil
	}
	s.httpCall = nil
	s.ctx, s.respHeader, s.respBody = nil, nil, nil
	s.sql, s.sqlResult, s.computeResult = nil, nil, nil // the session is the worker's to end
}

// fail records the first reason a host function stops the guest and returns it.
func (s *callState) fail(a *hostAbort) *hostAbort {
	if s.abort == nil {
		s.abort = a
	}
	return s.abort
}

func (s *callState) protocolError(format string, args ...any) *hostAbort {
	return s.fail(&hostAbort{kind: KindProtocolError, message: fmt.Sprintf(format, args...)})
}

// commandEnvelope is the stdin of a command-mode module: {"input":...,"context":...}.
func commandEnvelope(input, context []byte) []byte {
	b := make([]byte, 0, len(input)+len(context)+24)
	b = append(b, `{"input":`...)
	b = append(b, input...)
	b = append(b, `,"context":`...)
	b = append(b, context...)
	return append(b, '}')
}

// cappedText keeps the first max bytes written to it and remembers how much it dropped.
type cappedText struct {
	max     int
	buf     []byte
	dropped int
}

func (c *cappedText) write(p []byte) {
	room := c.max - len(c.buf)
	if room >= len(p) {
		c.buf = append(c.buf, p...)
		return
	}
	if room > 0 {
		c.buf = append(c.buf, p[:room]...)
		p = p[room:]
	}
	c.dropped += len(p)
}

func (c *cappedText) reset() { c.buf, c.dropped = c.buf[:0], 0 }

// String is the kept text as valid UTF-8, with a note when bytes were dropped.
func (c *cappedText) String() string {
	if c.dropped == 0 {
		return validText(c.buf)
	}
	kept := trimPartialRune(c.buf)
	return validText(kept) + fmt.Sprintf(" ... (%d more bytes truncated)", c.dropped+len(c.buf)-len(kept))
}

// validText turns guest bytes into valid UTF-8, replacing invalid sequences.
func validText(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// trimPartialRune drops a character cut in two by a cap at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
