package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// launch runs a started task on its own goroutine; its slot is freed when the handler ends.
func (w *Worker) launch(fs *flowState, t fetched.Task) {
	w.running.Add(1)
	ctx := w.known.add(w.runCtx, &t)
	if st := fs.steps[t.StepSlug]; st != nil && st.metrics != nil {
		st.metrics.started.Inc()
		if t.Attempt == 1 {
			st.metrics.queueWait.Observe(t.QueueWait.Seconds())
			if t.TaskIndex == 0 && st.metrics.runStarted != nil {
				st.metrics.runStarted.Inc()
			}
		}
	}
	if fs.inFlight != nil {
		fs.inFlight.Inc()
	}
	go func() {
		defer w.running.Done()
		released := false // the slot, freed here or by the completer (AddReleasing)
		defer func() {
			if !released {
				w.finished(fs)
			}
		}()
		began := time.Now()
		end := w.execute(ctx, fs, t)
		if fs.inFlight != nil {
			// Before the slot is freed (below, or by the completer at once): the gauge never
			// counts a handler that has ended beside the one that took its slot.
			fs.inFlight.Dec()
		}
		fs.handlerTime.observe(time.Since(began))
		w.known.handlerEnded(&t)
		if why := cancelCause(ctx); why != nil {
			w.dropCancelled(fs, t, why)
			return
		}
		switch {
		case end.written != nil:
			w.onWritten([]completer.Written{*end.written})
		case end.forget != "":
			w.known.forget(&t, end.forget)
			w.wakeStarved()
		default:
			o := end.outcome
			st := fs.steps[t.StepSlug]
			o.Awaited = !o.Failed && st != nil && len(st.claimable) > 0 && fs.claimQueue() != nil
			// The slot is freed once the outcome counts as awaited and before a writer can
			// claim its successor (completer.AddReleasing).
			released = true
			w.done.AddReleasing(o, func() { w.finished(fs) })
		}
	}()
}

// dropCancelled forgets a task pgflow no longer wants (its run failed, its step was skipped,
// another attempt holds it): its handler was stopped, and its outcome is not written, since
// pgflow would ignore it (0.15.1+) or, before, let a late fail_task overwrite a cancelled
// sibling's state.
func (w *Worker) dropCancelled(fs *flowState, t fetched.Task, why *cancelled) {
	w.known.remove(&t)
	w.taskLog(&t).log(slog.LevelInfo, "handler stopped: pgflow cancelled the task", "why", why.reason, "task_status", why.status)
	if m := w.cfg.Metrics; m != nil {
		m.TasksCancelled.WithLabelValues(t.FlowSlug, t.StepSlug).Inc()
	}
	w.wakeStarved()
}

// execute runs one task in the sandbox, under ctx (cancelled when pgflow cancels the task,
// or when the drain runs out), and returns its outcome: for the completer, or, for a
// transactional SQL step, written already with the handler's writes (sql.go).
func (w *Worker) execute(ctx context.Context, fs *flowState, t fetched.Task) txEnd {
	log := w.taskLog(&t)
	st := fs.steps[t.StepSlug]
	if st == nil {
		msg := fmt.Sprintf("step %q is not in this worker's flows file (%s)", t.StepSlug, w.cfg.Flows.Path)
		log.log(slog.LevelError, "cannot run task", "error", msg)
		return txEnd{outcome: completer.Outcome{Task: t, Failed: true, Error: msg}}
	}
	log.log(slog.LevelDebug, "task started")
	ctxJSON, err := step.Context(t, fs.workerID, st.timeout, st.ctxShape, w.pgflow().Version)
	if err != nil {
		return txEnd{outcome: completer.Outcome{Task: t, Failed: true, Error: err.Error()}}
	}
	task := sandbox.Task{Input: t.Input, Context: ctxJSON, Timeout: st.timeout}
	if st.def.Deterministic {
		task.Seed, task.FixedClock = step.Seed(&t), true
	}
	var sess *sqlsession.Session
	if st.sql != nil {
		sess = st.sql.Begin(time.Now().Add(st.timeout))
		task.SQL = sess
		// Rolls back what a failed, timed-out or cancelled task left open before its
		// failure is written, so a retry finds no lock of it; a no-op after Complete.
		defer sess.Close()
	}
	ti := pgflowtype.TaskInfo{FlowSlug: t.FlowSlug, StepSlug: t.StepSlug, RunID: t.RunID, TaskIndex: t.TaskIndex, Attempt: t.Attempt,
		WorkerID: t.WorkerID, Engine: w.cfg.Engine.Name()}
	hookCtx := w.hookStarted(ti)
	log.ctx = hookCtx // a tracer's span reaches the log handler (trace_id)
	runCtx := ctx
	if w.cfg.Hooks.TaskStarted != nil {
		runCtx = withHookValues(ctx, hookCtx)
	}
	if t.Moments != nil {
		t.Moments.HandlerStart = time.Now()
	}
	res, err := st.module.Run(runCtx, task)
	if t.Moments != nil {
		t.Moments.HandlerEnd = time.Now()
	}
	for _, l := range res.Logs {
		log.log(guestLevel(l.Level), l.Message, "source", "handler")
	}
	if res.LogsDropped > 0 {
		log.log(slog.LevelWarn, "handler log lines dropped over the per-task cap", "dropped", res.LogsDropped)
	}
	if st.metrics != nil {
		st.metrics.duration.Observe(res.Duration.Seconds())
		st.metrics.fuel.Add(float64(res.FuelUsed))
	}
	if err == nil {
		log.log(slog.LevelDebug, "handler succeeded", "duration", res.Duration)
		w.hookFinished(hookCtx, ti, pgflowtype.TaskResult{Duration: res.Duration, FuelUsed: res.FuelUsed})
		o := completer.Outcome{Task: t, Output: res.Output}
		if sess != nil && sess.Open() && cancelCause(ctx) == nil {
			return w.completeInTx(t, sess, o)
		}
		return txEnd{outcome: o}
	}
	msg, kind := failMessage(err, st.timeout)
	if why := cancelCause(ctx); why != nil {
		// Stopped because pgflow cancelled the task: launch drops the outcome and says why.
		w.hookFinished(hookCtx, ti, pgflowtype.TaskResult{Duration: res.Duration, FuelUsed: res.FuelUsed, Failed: true, Kind: "cancelled", Error: why.Error()})
		return txEnd{outcome: completer.Outcome{Task: t, Failed: true, Error: why.Error()}}
	}
	if w.runCtx.Err() != nil && kind != sandbox.KindTimeout {
		msg = drainCutMessage(w.cfg.DrainTimeout, t.Attempt, st.maxAttempts, msg)
	}
	w.hookFinished(hookCtx, ti, pgflowtype.TaskResult{Duration: res.Duration, FuelUsed: res.FuelUsed, Failed: true, Kind: string(kind), Error: msg})
	if m := w.cfg.Metrics; m != nil {
		m.TasksFailed.WithLabelValues(t.FlowSlug, t.StepSlug, string(kind)).Inc()
		if kind == sandbox.KindTimeout {
			m.TasksTimedOut.WithLabelValues(t.FlowSlug, t.StepSlug).Inc()
		}
	}
	log.log(slog.LevelWarn, "handler failed", "kind", string(kind), "error", msg, "duration", res.Duration)
	if kind == sandbox.KindTimeout {
		w.checkAbandoned()
	}
	return txEnd{outcome: completer.Outcome{Task: t, Failed: true, Error: msg}}
}

// drainCutMessage is what a task cut by the drain timeout of a shutdown stores: what
// happened, and what pgflow does next (a retry spends an attempt: pgflow has no way to hand a
// started task back without one).
func drainCutMessage(drain time.Duration, attempt, maxAttempts int, handler string) string {
	next := fmt.Sprintf("pgflow retries it (attempt %d of %d)", attempt+1, maxAttempts)
	if maxAttempts > 0 && attempt >= maxAttempts {
		next = fmt.Sprintf("this was its last attempt (%d of %d), so the task fails for good: give shutdowns a longer --drain-timeout or the step more max_attempts", attempt, maxAttempts)
	}
	return fmt.Sprintf("Stopped by a worker shutdown: the handler had not finished when the drain timeout (%s) ran out; %s. Handler: %s",
		drain, next, handler)
}

// failMessage is the fail_task message: pgflow's wording for timeouts, "kind: message" else.
func failMessage(err error, timeout time.Duration) (string, sandbox.Kind) {
	var se *sandbox.Error
	if !errors.As(err, &se) {
		return err.Error(), sandbox.KindProtocolError
	}
	if se.Kind == sandbox.KindTimeout {
		return fmt.Sprintf("Task timed out after %ds", int(timeout/time.Second)), se.Kind
	}
	return withGuestHint(se.Error()), se.Kind
}

// checkAbandoned stops the worker for a restart when the watchdog has given up on too many
// calls: their goroutines still burn CPU and only a new process reclaims them.
func (w *Worker) checkAbandoned() {
	if n := w.cfg.Engine.Abandoned(); n >= w.cfg.MaxAbandoned {
		w.log.Error("too many abandoned handler calls: restarting the worker", "abandoned", n, "max", w.cfg.MaxAbandoned)
		w.restart.Store(true)
		w.Drain()
	}
}

func guestLevel(l int32) slog.Level {
	switch l {
	case abi.LogDebug:
		return slog.LevelDebug
	case abi.LogWarn:
		return slog.LevelWarn
	case abi.LogError:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// onWritten runs after each write of outcomes: metrics, one log line per task, and the
// wake-ups that keep a run moving (a completion whose step has dependents; a retry's delay;
// fetch loops held back while outcomes waited to be written).
func (w *Worker) onWritten(written []completer.Written) {
	defer w.wakeStarved()
	if m := w.cfg.Metrics; m != nil {
		defer func() { m.Unwritten.Set(float64(w.done.Pending())) }()
	}
	now := time.Now()
	for _, wr := range written {
		t := wr.Task
		w.hookWritten(&wr)
		w.known.remove(&t)
		if wr.Err == nil && !wr.Stale {
			w.known.wrote(&t, now)
		}
		w.countWritten(&wr)
		w.runEnded(&wr)
		fs := w.byFlow[t.FlowSlug]
		if fs == nil {
			continue
		}
		st := fs.steps[t.StepSlug]
		log := w.taskLog(&t)
		switch {
		case wr.Err != nil:
			log.log(slog.LevelError, "task outcome not written", "error", wr.Err)
		case wr.Stale && (strings.HasPrefix(wr.StaleReason, "pgflow cancelled") || strings.HasPrefix(wr.StaleReason, "pgflow skipped")):
			// pgflow gave up on the task while it ran: nothing went wrong here.
			log.log(slog.LevelInfo, "outcome not applied", "why", wr.StaleReason)
		case wr.Stale:
			log.log(slog.LevelWarn, "outcome not applied: the task was no longer started by this attempt", "why", wr.StaleReason)
		case !wr.Failed && wr.Status == "completed":
			if st != nil && st.metrics != nil {
				st.metrics.completed.Inc()
			}
			log.log(slog.LevelDebug, "task completed", "took", time.Since(t.StartedAt).Round(time.Microsecond))
			if st != nil && st.hasDependents {
				if !wr.SuccessorsClaimed { // started already in the completion's transaction (claim.go)
					fs.ring()
				}
				if st.maxDependentStartDelay > 0 {
					time.AfterFunc(time.Duration(st.maxDependentStartDelay)*time.Second+50*time.Millisecond, fs.ring)
				}
			}
		case !wr.Failed && (wr.Status == "" || strings.HasPrefix(wr.ErrorMessage, "[TYPE_VIOLATION]")):
			// pgflow 0.8 returns no row, 0.14 the failed task.
			log.log(slog.LevelWarn, "pgflow refused the output: a dependent map step needs an array, so the run failed",
				"pgflow_error", wr.ErrorMessage)
			w.cancelRunTasks(t.RunID, fmt.Sprintf("step %s returned what a dependent map step cannot take", t.StepSlug))
		case wr.Status == "started":
			// pgflow 0.14 leaves a task of a step that is no longer started as it is (and an
			// earlier pgflow the tasks of a run that already failed).
			log.log(slog.LevelInfo, "pgflow ignored the outcome: the step or the run had ended without this task (skipped, or failed elsewhere)")
		case !wr.Failed:
			log.log(slog.LevelInfo, "pgflow ignored the output: the run had already failed", "task_status", wr.Status)
		case wr.Status == "queued":
			log.log(slog.LevelInfo, "task failed; pgflow will retry it", "error", wr.Error, "attempts", wr.Attempts)
			fs.ring()
			w.wakeAfterRetry(fs, t.StepSlug, wr.Attempts)
		case wr.StepStatus == "skipped":
			log.log(slog.LevelWarn, "task failed for good: attempts used up; its step is skipped (when_exhausted) and the run goes on",
				"error", wr.Error, "attempts", wr.Attempts, "run_status", wr.RunStatus)
			fs.ring()
		default:
			log.log(slog.LevelWarn, "task failed for good: attempts used up, the run failed", "error", wr.Error, "attempts", wr.Attempts)
			w.cancelRunTasks(t.RunID, fmt.Sprintf("task %s[%d] failed for good", t.StepSlug, t.TaskIndex))
			fs.ring()
		}
	}
}

// countWritten counts what a written outcome did to its task and run.
func (w *Worker) countWritten(wr *completer.Written) {
	m := w.cfg.Metrics
	if m == nil || wr.Err != nil || wr.Stale {
		return
	}
	t := &wr.Task
	if wr.Failed && wr.Status == "queued" {
		m.TasksRetried.WithLabelValues(t.FlowSlug, t.StepSlug).Inc()
	}
	e := wr.RunEnded
	if e == nil {
		return
	}
	switch e.Status {
	case "completed":
		m.RunsCompleted.WithLabelValues(t.FlowSlug).Inc()
	case "failed":
		m.RunsFailed.WithLabelValues(t.FlowSlug).Inc()
	default:
		return
	}
	m.RunDuration.WithLabelValues(t.FlowSlug, e.Status).Observe(e.Ended.Sub(e.StartedAt).Seconds())
}

// runEnded tells the hooks of a run this worker's write ended.
func (w *Worker) runEnded(wr *completer.Written) {
	if e := wr.RunEnded; e != nil && wr.Err == nil && !wr.Stale && w.cfg.Hooks.RunEnded != nil {
		w.cfg.Hooks.RunEnded(w.runCtx, pgflowtype.RunEnd{RunID: e.RunID, FlowSlug: e.Flow, Status: e.Status,
			StartedAt: e.StartedAt, EndedAt: e.Ended})
	}
}

// taskLog logs lines about one task with its run, flow, step, index, attempt and message
// id. The attributes are only formatted when a line is actually logged: building them for
// every task showed in profiles, and at the default level (info) a successful task logs
// nothing (its lines are debug; metrics count them).
func (w *Worker) taskLog(t *fetched.Task) *taskLogger {
	return &taskLogger{base: w.log, ctx: w.runCtx, t: t}
}

type taskLogger struct {
	base *slog.Logger
	ctx  context.Context
	t    *fetched.Task
	l    *slog.Logger
}

func (tl *taskLogger) log(level slog.Level, msg string, args ...any) {
	if !tl.base.Enabled(tl.ctx, level) {
		return
	}
	if tl.l == nil {
		t := tl.t
		tl.l = tl.base.With("run_id", t.RunID, "flow", t.FlowSlug, "step", t.StepSlug, "task_index", t.TaskIndex,
			"attempt", t.Attempt, "msg_id", t.MsgID)
	}
	tl.l.Log(tl.ctx, level, msg, args...)
}
