package worker

import (
	"context"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
)

// registerProcess records the worker's process and its rows (package procctl) and reads
// whether the process is drained, before any task is fetched. A role that may not create
// pgflow-wasm's tables costs only the drain: the worker serves, and says so.
func (w *Worker) registerProcess(ctx context.Context) {
	ids := make([]string, len(w.flows))
	for i, fs := range w.flows {
		ids[i] = fs.workerID
	}
	p := w.cfg.Process
	if err := procctl.Register(ctx, w.cfg.Pool, p, ids); err != nil {
		w.log.Warn("this worker process cannot be drained as a whole: registering it in pgflow_wasm.worker_processes failed",
			"error", err, "fix", "run `pgflow-wasm db install` once as a role that may create schema pgflow_wasm")
		return
	}
	w.processKnown = true
	w.readDrained(ctx)
}

// drainWatch reads the process's drain flag every heartbeat interval.
func (w *Worker) drainWatch(ctx context.Context) {
	service.Every(ctx, w.cfg.HeartbeatInterval, w.readDrained)
}

// readDrained applies the drain flag: drained, the fetch loops and claims take nothing new
// once the fetches and claims already under way have ended (applyDrain); undrained, every
// queue is looked at at once.
func (w *Worker) readDrained(ctx context.Context) {
	drained, err := procctl.Drained(ctx, w.cfg.Pool, w.cfg.Process.ID)
	if err != nil {
		if ctx.Err() == nil {
			w.dbError("read drain flag", err)
		}
		return
	}
	if w.drained.Swap(drained) == drained {
		return
	}
	if drained {
		w.applyDrain(ctx)
		w.drainApplied.Store(true)
		w.log.Info("worker process drained by an operator: no new tasks; running ones finish", "process_id", w.cfg.Process.ID)
		return
	}
	w.drainApplied.Store(false)
	w.log.Info("worker process undrained by an operator: taking tasks again", "process_id", w.cfg.Process.ID)
	for _, fs := range w.flows {
		fs.ring()
	}
}

// applyDrain waits, once w.drained is set, for the claims and fetches that began before it:
// a claim holds claimGate (read) until its tasks are launched, and a fetch counts itself in
// fetching before it looks at w.drained again, so either it sees the flag or this sees it.
func (w *Worker) applyDrain(ctx context.Context) {
	w.claimGate.Lock()
	w.claimGate.Unlock() // nothing inside: taking it waited for the claims before
	for _, fs := range w.flows {
		for fs.fetching.Load() > 0 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Drained reports whether the worker's process is drained, as the worker last read it, and
// every fetch and claim begun before has ended: from then on it takes no new task.
func (w *Worker) Drained() bool { return w.drainApplied.Load() }

// ProcessID is the id of the worker process this worker belongs to.
func (w *Worker) ProcessID() string { return w.cfg.Process.ID }
