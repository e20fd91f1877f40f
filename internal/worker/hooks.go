package worker

import (
	"context"
	"time"
)

// Hooks let a program that embeds the worker observe its tasks (its own metrics, traces).
// Both run on the task's goroutine: keep them quick. A nil hook is skipped.
type Hooks struct {
	// TaskStarted is called just before a task's handler runs; the context it returns is
	// the one TaskFinished gets (a tracer starts a span in it). Its values (not its
	// cancellation) also reach the handler's run: the sandbox's HTTP requests see the span.
	TaskStarted func(ctx context.Context, t TaskInfo) context.Context
	// TaskFinished is called when the handler has ended, before its outcome is written.
	TaskFinished func(ctx context.Context, t TaskInfo, r TaskResult)
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

func (w *Worker) hookStarted(ti TaskInfo) context.Context {
	ctx := w.runCtx
	if h := w.cfg.Hooks.TaskStarted; h != nil {
		if c := h(ctx, ti); c != nil {
			ctx = c
		}
	}
	return ctx
}

func (w *Worker) hookFinished(ctx context.Context, ti TaskInfo, r TaskResult) {
	if h := w.cfg.Hooks.TaskFinished; h != nil {
		h(ctx, ti, r)
	}
}

// withHookValues is the task's context (its cancellation, its deadline) that also carries
// the values of the context TaskStarted returned, which may not derive from the task's.
func withHookValues(task, hook context.Context) context.Context {
	if hook == nil {
		return task
	}
	return hookValues{Context: task, hook: hook}
}

type hookValues struct {
	context.Context
	hook context.Context
}

func (c hookValues) Value(key any) any {
	if v := c.hook.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}
