// Package pgflowtype holds the types a program that embeds pgflow-wasm holds: runs, task
// hooks and what they are given, the signal choice, error sentinels and the shape error.
// It is a leaf: it imports nothing of pgflow-wasm, so the root package, the command and
// every internal package share these types without an import going up.
package pgflowtype

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Signal chooses how a worker learns that new tasks wait.
type Signal string

// Signals.
const (
	// SignalPolling reads the queue with decorrelated-jitter backoff between
	// MinPollInterval and MaxPollInterval, back to the minimum whenever work is found.
	SignalPolling Signal = "polling"
	// SignalNotify LISTENs for the queue's insert notifications, with a fallback poll
	// every NotifyFallback.
	SignalNotify Signal = "notify"
)

// Hooks let a program that embeds the worker observe its tasks (its own metrics, traces,
// measurements). They run on the worker's goroutines: keep them quick. A nil hook is
// skipped, and costs nothing.
type Hooks struct {
	// TaskStarted is called just before a task's handler runs; the context it returns is
	// the one TaskFinished gets (a tracer starts a span in it). Its values (not its
	// cancellation) also reach the handler's run: the sandbox's HTTP requests see the span.
	TaskStarted func(ctx context.Context, t TaskInfo) context.Context
	// TaskFinished is called when the handler has ended, before its outcome is written.
	TaskFinished func(ctx context.Context, t TaskInfo, r TaskResult)
	// TaskWritten is called once a task's outcome is committed, with the moments of its way
	// through the worker; only while it is set does the worker take them.
	TaskWritten func(t TaskInfo, m TaskMoments)
	// RunEnded is called once a run ended (completed or failed) with an outcome this worker
	// wrote: once per run across all workers, since only one write ends it. A run ended
	// otherwise (failed by hand, or by a worker of another kind) is not reported.
	RunEnded func(ctx context.Context, r RunEnd)
}

// RunEnd is a run that ended, with pgflow's times.
type RunEnd struct {
	RunID     string
	FlowSlug  string
	Status    string // completed or failed
	StartedAt time.Time
	EndedAt   time.Time
}

// ChainHooks runs the hooks of a, then b's (TaskStarted threads the context through both;
// TaskFinished runs b's first, so a tracer's span ends after hooks started inside it).
func ChainHooks(a, b Hooks) Hooks {
	empty := func(h Hooks) bool {
		return h.TaskStarted == nil && h.TaskFinished == nil && h.TaskWritten == nil && h.RunEnded == nil
	}
	switch {
	case empty(a):
		return b
	case empty(b):
		return a
	}
	written := a.TaskWritten
	switch {
	case a.TaskWritten == nil:
		written = b.TaskWritten
	case b.TaskWritten != nil:
		written = func(ti TaskInfo, m TaskMoments) {
			a.TaskWritten(ti, m)
			b.TaskWritten(ti, m)
		}
	}
	return Hooks{
		TaskWritten: written,
		TaskStarted: func(ctx context.Context, ti TaskInfo) context.Context {
			for _, h := range []func(context.Context, TaskInfo) context.Context{a.TaskStarted, b.TaskStarted} {
				if h != nil {
					if c := h(ctx, ti); c != nil {
						ctx = c
					}
				}
			}
			return ctx
		},
		TaskFinished: func(ctx context.Context, ti TaskInfo, r TaskResult) {
			if b.TaskFinished != nil {
				b.TaskFinished(ctx, ti, r)
			}
			if a.TaskFinished != nil {
				a.TaskFinished(ctx, ti, r)
			}
		},
		RunEnded: func(ctx context.Context, r RunEnd) {
			for _, h := range []func(context.Context, RunEnd){a.RunEnded, b.RunEnded} {
				if h != nil {
					h(ctx, r)
				}
			}
		},
	}
}

// TaskMoments are when one task passed each point of the worker, on this machine's clock
// (zero: not passed, or not known): where a step-to-step hop's time goes.
type TaskMoments struct {
	// Cause is what woke the fetch that got the task: "wake" (a notification, a completion
	// whose step has dependents, a full batch, a freed slot), "timer" (the poll interval,
	// the notify fallback) or "claimed" (started by the transaction that completed its
	// dependency).
	Cause        string
	Woke         time.Time // the fetch loop woke
	FetchBegan   time.Time // the fetch was sent
	ClaimSent    time.Time // start_tasks was sent, the read back
	Fetched      time.Time // the fetch returned
	HandlerStart time.Time
	HandlerEnd   time.Time
	WriteBegan   time.Time // the transaction writing the outcome was sent
	Committed    time.Time // its commit came back
}

// TaskInfo names a task that runs.
type TaskInfo struct {
	FlowSlug  string
	StepSlug  string
	RunID     string
	TaskIndex int
	Attempt   int    // 1 on the first try
	WorkerID  string // the pgflow.workers row that started it
	Engine    string // sandbox engine name
}

// TaskResult is how a handler ended.
type TaskResult struct {
	Duration time.Duration
	Failed   bool
	Kind     string // the sandbox's error kind when Failed (timeout, trap, handler_error...)
	Error    string // the message pgflow records when Failed
	FuelUsed int64
}

// Run is one pgflow run.
type Run struct {
	ID     string
	Flow   string
	Status string // started, completed, failed
	// Input and Output are the run's values, whole (Output is null until the run completed).
	// List reads neither; RunPreview reads their beginnings instead.
	Input          json.RawMessage
	Output         json.RawMessage
	RemainingSteps int
	StartedAt      time.Time
	CompletedAt    *time.Time
	FailedAt       *time.Time
	// Error is the error message of the first step that failed, on a failed run (in a list
	// cut to 300 characters), and FailedStep that step's slug.
	Error      string
	FailedStep string
}

// ErrorLine is the run's failure on one line: the failing step, then its error with every
// run of whitespace (newlines included) as one space, cut to about n characters.
func (r *Run) ErrorLine(n int) string {
	if r.Error == "" && r.FailedStep == "" {
		return ""
	}
	line := strings.Join(strings.Fields(r.Error), " ")
	if r.FailedStep != "" {
		line = r.FailedStep + ": " + line
	}
	if runes := []rune(line); len(runes) > n {
		line = string(runes[:max(n-1, 1)]) + "…"
	}
	return line
}

// Done reports whether the run reached a final state.
func (r *Run) Done() bool { return r.Status == "completed" || r.Status == "failed" }

// EndedAt is when the run completed or failed, nil while it runs.
func (r *Run) EndedAt() *time.Time {
	if r.CompletedAt != nil {
		return r.CompletedAt
	}
	return r.FailedAt
}

// Duration is how long the run took, or has taken so far by this machine's clock.
func (r *Run) Duration() time.Duration {
	if end := r.EndedAt(); end != nil {
		return end.Sub(r.StartedAt)
	}
	return time.Since(r.StartedAt)
}

// ErrFlowNotFound is returned (wrapped) when starting a flow the database does not know.
var ErrFlowNotFound = errors.New("flow not found")

// ErrNotFound is returned (wrapped, with the reason) for a run, step, task or worker the
// database does not have, or a text that is no run id. Run ids are uuids, read with or
// without their hyphens.
var ErrNotFound = errors.New("not found")

// ShapeError is returned when a flow in the database has another shape than in the file.
type ShapeError struct {
	Flow        string
	Differences []string
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("flow %q in the database has another shape than in the flows file:\n  - %s\n"+
		"pgflow flows are immutable: give the changed flow a new slug (e.g. %s_v2) and start new runs on it",
		e.Flow, strings.Join(e.Differences, "\n  - "), e.Flow)
}

// PruneOptions says which finished runs a prune deletes: those that completed or failed at
// least OlderThan ago (by the database's clock; must be positive), BatchSize runs per
// transaction [1000]; Progress, when set, is told the totals so far after each batch.
type PruneOptions struct {
	OlderThan time.Duration
	BatchSize int
	Progress  func(Pruned)
}

// Pruned counts what a prune deleted (or a dry run would): runs, their step states and
// tasks, their tasks' archived queue messages, and pgflow-wasm's own rows about them by
// table (e.g. "pgflow_wasm.task_attempts").
type Pruned struct {
	Runs             int64
	StepStates       int64
	StepTasks        int64
	ArchivedMessages int64
	Own              map[string]int64
	Batches          int
}

// OwnTables lists Own's tables in a stable order, for printing.
func (p Pruned) OwnTables() []string {
	out := make([]string, 0, len(p.Own))
	for t := range p.Own {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
