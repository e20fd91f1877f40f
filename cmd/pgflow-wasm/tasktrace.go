package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// taskTraceEnv names a file serve appends one JSON line per written task to, with the
// moments of its way through the worker (Unix microseconds, this machine's clock): the
// benchmark's instrument for where a chain's step-to-step hop goes (pgflow-wasm-bench reads
// it; docs/benchmarks.md). Unset, the worker takes no moments at all.
const taskTraceEnv = "PGFLOW_WASM_TASK_TRACE"

// taskTraceLine is one line of the task trace.
type taskTraceLine struct {
	Run          string `json:"run"`
	Step         string `json:"step"`
	Index        int    `json:"idx"`
	Attempt      int    `json:"attempt"`
	Cause        string `json:"cause"`
	Woke         int64  `json:"woke"`
	FetchBegan   int64  `json:"fetch"`
	ClaimSent    int64  `json:"claim"`
	Fetched      int64  `json:"fetched"`
	HandlerStart int64  `json:"hstart"`
	HandlerEnd   int64  `json:"hend"`
	WriteBegan   int64  `json:"wbegin"`
	Committed    int64  `json:"commit"`
}

// taskTrace adds the recorder to hooks when taskTraceEnv names a file; close closes it.
func taskTrace(hooks pgflowtype.Hooks) (_ pgflowtype.Hooks, close func(), _ error) {
	path := os.Getenv(taskTraceEnv)
	if path == "" {
		return hooks, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return hooks, nil, fmt.Errorf("%s: %w", taskTraceEnv, err)
	}
	hooks.TaskWritten = func(t pgflowtype.TaskInfo, m pgflowtype.TaskMoments) {
		line, _ := json.Marshal(taskTraceLine{Run: t.RunID, Step: t.StepSlug, Index: t.TaskIndex, Attempt: t.Attempt,
			Cause: m.Cause, Woke: micros(m.Woke), FetchBegan: micros(m.FetchBegan), ClaimSent: micros(m.ClaimSent),
			Fetched: micros(m.Fetched), HandlerStart: micros(m.HandlerStart), HandlerEnd: micros(m.HandlerEnd),
			WriteBegan: micros(m.WriteBegan), Committed: micros(m.Committed)})
		// One write per line (O_APPEND): lines of workers of one process never interleave.
		_, _ = f.Write(append(line, '\n'))
	}
	return hooks, func() { _ = f.Close() }, nil
}

// micros is t in Unix microseconds, 0 for the zero time (not known).
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}
