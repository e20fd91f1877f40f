package worker

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
)

// TaskTraceEnv names a file the worker appends one JSON line per written task to: when its
// fetch loop woke for the task and why, when the fetch began and returned, when the handler
// started and ended, when the outcome's write began and when its commit came back (Unix
// microseconds, this machine's clock). It is the benchmark's instrument for where a chain's
// step-to-step hop goes (`pgflow-wasm-bench`, docs/benchmarks.md); unset, nothing is
// recorded and nothing is paid.
const TaskTraceEnv = "PGFLOW_WASM_TASK_TRACE"

// TraceLine is one line of the task trace.
type TraceLine struct {
	Run     string `json:"run"`
	Step    string `json:"step"`
	Index   int    `json:"idx"`
	Attempt int    `json:"attempt"`
	// Cause is what woke the fetch loop for the fetch that got the task: "wake" (a
	// notification, a completion whose step has dependents, a full batch, a freed slot) or
	// "timer" (the poll interval, the notify fallback).
	Cause        string `json:"cause"`
	Woke         int64  `json:"woke"`
	FetchBegan   int64  `json:"fetch"`
	ClaimSent    int64  `json:"claim"` // start_tasks sent, the read back
	Fetched      int64  `json:"fetched"`
	HandlerStart int64  `json:"hstart"`
	HandlerEnd   int64  `json:"hend"`
	WriteBegan   int64  `json:"wbegin"`
	Committed    int64  `json:"commit"`
}

// taskTrace records TraceLines; a nil *taskTrace records nothing.
type taskTrace struct {
	f  *os.File
	mu sync.Mutex
	m  map[writtenKey]*TraceLine
}

func openTaskTrace() (*taskTrace, error) {
	path := os.Getenv(TaskTraceEnv)
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TaskTraceEnv, err)
	}
	return &taskTrace{f: f, m: map[writtenKey]*TraceLine{}}, nil
}

func (tt *taskTrace) line(t *fetched.Task) *TraceLine {
	k := writtenKey{keyOf(t), t.Attempt}
	l := tt.m[k]
	if l == nil {
		l = &TraceLine{Run: t.RunID, Step: t.StepSlug, Index: t.TaskIndex, Attempt: t.Attempt}
		tt.m[k] = l
	}
	return l
}

// fetched records the fetch that started t.
func (tt *taskTrace) fetched(t *fetched.Task, cause string, woke, began, fetched time.Time) {
	if tt == nil {
		return
	}
	tt.mu.Lock()
	l := tt.line(t)
	l.Cause, l.Woke, l.FetchBegan, l.ClaimSent, l.Fetched = cause, micros(woke), micros(began), micros(t.ClaimSent), micros(fetched)
	tt.mu.Unlock()
}

// handler records when t's handler started (end false) or ended (end true).
func (tt *taskTrace) handler(t *fetched.Task, end bool) {
	if tt == nil {
		return
	}
	now := time.Now().UnixMicro()
	tt.mu.Lock()
	if l := tt.line(t); end {
		l.HandlerEnd = now
	} else {
		l.HandlerStart = now
	}
	tt.mu.Unlock()
}

// written writes the line of a task whose outcome was written, and forgets it.
func (tt *taskTrace) written(wr *completer.Written) {
	if tt == nil {
		return
	}
	t := &wr.Task
	k := writtenKey{keyOf(t), t.Attempt}
	tt.mu.Lock()
	l := tt.m[k]
	delete(tt.m, k)
	tt.mu.Unlock()
	if l == nil || wr.Err != nil || wr.Stale {
		return
	}
	l.WriteBegan, l.Committed = micros(wr.WriteBegan), micros(wr.Committed)
	// One write per line (O_APPEND): lines of workers of one process never interleave.
	_, _ = fmt.Fprintf(tt.f, `{"run":%q,"step":%q,"idx":%d,"attempt":%d,"cause":%q,"woke":%d,"fetch":%d,"claim":%d,"fetched":%d,"hstart":%d,"hend":%d,"wbegin":%d,"commit":%d}`+"\n",
		l.Run, l.Step, l.Index, l.Attempt, l.Cause, l.Woke, l.FetchBegan, l.ClaimSent, l.Fetched, l.HandlerStart, l.HandlerEnd, l.WriteBegan, l.Committed)
}

func (tt *taskTrace) close() {
	if tt != nil {
		_ = tt.f.Close()
	}
}

// micros is t in Unix microseconds, 0 for the zero time (not known).
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}
