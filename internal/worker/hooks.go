package worker

import (
	"context"

	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

func (w *Worker) hookStarted(ti pgflowtype.TaskInfo) context.Context {
	ctx := w.runCtx
	if h := w.cfg.Hooks.TaskStarted; h != nil {
		if c := h(ctx, ti); c != nil {
			ctx = c
		}
	}
	return ctx
}

func (w *Worker) hookFinished(ctx context.Context, ti pgflowtype.TaskInfo, r pgflowtype.TaskResult) {
	if h := w.cfg.Hooks.TaskFinished; h != nil {
		h(ctx, ti, r)
	}
}

// hookWritten hands TaskWritten the moments of a task whose outcome was committed.
func (w *Worker) hookWritten(wr *completer.Written) {
	h, m := w.cfg.Hooks.TaskWritten, wr.Task.Moments
	if h == nil || m == nil || wr.Err != nil || wr.Stale {
		return
	}
	t := &wr.Task
	moments := *m
	moments.WriteBegan, moments.Committed = wr.WriteBegan, wr.Committed
	h(pgflowtype.TaskInfo{FlowSlug: t.FlowSlug, StepSlug: t.StepSlug, RunID: t.RunID, TaskIndex: t.TaskIndex, Attempt: t.Attempt,
		WorkerID: t.WorkerID, Engine: w.cfg.Engine.Name()}, moments)
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
