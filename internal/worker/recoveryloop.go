package worker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/recovery"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// recoveryLoop sweeps for stalled tasks at start (a previous worker may have died moments
// ago) and then every RecoveryInterval, or sooner, once LivenessGrace has passed, when it saw
// a worker's liveness lock missing: the second look that tells a dead worker from a
// reconnecting one then comes a grace after the first, however long the interval. So many
// workers can sweep rarely (each sweep reads pg_locks and every started task of its flows)
// and a dead worker's tasks still come back a grace after the first sweep that notices.
func (w *Worker) recoveryLoop(ctx context.Context) {
	newSweeper := func() *recovery.Sweeper {
		cfg := recovery.Config{WorkerStaleAfter: w.cfg.WorkerStaleAfter, StartedMargin: w.cfg.StalledMargin,
			LivenessGrace: w.cfg.LivenessGrace, ForeignStaleAfter: max(w.cfg.ForeignStaleAfter, 0), Self: w.workerIDs(),
			PermanentlyStalled: w.pgflow().Requeue, QueueNames: w.pgflow().QueueNames, AttemptHistory: w.history,
			Holding: func(run, step string, index int) bool { return w.known.has(taskKey{run, step, index}) }}
		for _, fs := range w.flows {
			cfg.Flows = append(cfg.Flows, fs.def.Slug)
		}
		return recovery.NewSweeper(w.cfg.Pool, cfg)
	}
	generation := w.upgrade.generation.Load()
	sweeper := newSweeper()
	next := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		if g := w.upgrade.generation.Load(); g != generation { // pgflow changed under the worker
			generation, sweeper = g, newSweeper()
		}
		w.pruneAttemptHistory(ctx)
		gens, readAt := w.fetchGenerations(), time.Now()
		got, own, err := sweeper.SweepOwn(ctx)
		if err == nil {
			w.countReaders(ctx, sweeper.Readers())
		}
		next = sweepInterval(w.cfg.RecoveryInterval, w.sharedBy())
		if sweeper.Suspects() {
			next = min(next, w.cfg.LivenessGrace)
		}
		if err == nil {
			w.handBackOrphans(ctx, own, gens, readAt)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("stalled-task sweep failed", "error", err)
			}
			continue
		}
		for _, r := range got {
			fs := w.byFlow[r.FlowSlug]
			w.log.Warn("recovered a stalled task", "run_id", r.RunID, "flow", r.FlowSlug, "step", r.StepSlug,
				"task_index", r.TaskIndex, "status", r.Status, "requeued", r.Requeued, "attempts", r.Attempts, "reason", r.Reason)
			if m := w.cfg.Metrics; m != nil {
				m.Recovered.WithLabelValues(r.FlowSlug).Inc()
				if r.Requeued {
					m.TasksRequeued.WithLabelValues(r.FlowSlug, "stalled").Inc()
				}
			}
			switch {
			case fs == nil || r.Status != "queued":
			case r.Requeued:
				fs.ring() // its message is visible now
			default:
				w.wakeAfterRetry(fs, r.StepSlug, r.Attempts)
			}
		}
	}
}

// maxSpreadInterval is the longest a worker stretches its sweep interval to because other
// workers sweep the same flows (a --recovery-interval above it is kept as it is). Its own
// fetches whose reply was lost (orphans.go) are found by its own sweeps only, so they wait
// up to this long to be handed back.
const maxSpreadInterval = 30 * time.Second

// sweepInterval is the wait before a worker's next sweep when shared live workers read every
// one of its flows: each of them sweeps the same tasks, so each sweeps shared times less
// often and together they still sweep about once a base interval. Every sweep reads pg_locks
// and every started task of its flows, so many workers each sweeping at the base interval
// cost throughput that leases had won back. Shared waits are spread ±25% so that workers
// started together do not sweep together.
func sweepInterval(base time.Duration, shared int) time.Duration {
	if shared <= 1 {
		return base
	}
	d := min(base*time.Duration(shared), max(base, maxSpreadInterval))
	return d*3/4 + rand.N(d/2+1)
}

// countReaders keeps the last sweep's count of each flow's live readers. A worker that
// reads every flow alone ends its lease session (automatic leases open it again when needed).
func (w *Worker) countReaders(ctx context.Context, readers map[string]int) {
	shared := false
	for _, fs := range w.flows {
		n := readers[fs.workerID] // 0: not counted
		fs.readers.Store(int32(n))
		shared = shared || n >= autoLeaseReaders
	}
	if w.readerCounts.Add(1) >= 2 && !shared && w.leases != nil && w.cfg.FetchLeases == 0 {
		w.leases.Close(ctx)
	}
}

// sharedBy is the fewest live workers reading one of this worker's flows (1 when unknown):
// how many sweepers share the flow it alone might have to sweep.
func (w *Worker) sharedBy() int {
	shared := 0
	for _, fs := range w.flows {
		n := max(int(fs.readers.Load()), 1)
		if shared == 0 || n < shared {
			shared = n
		}
	}
	return max(shared, 1)
}

// pruneAttemptHistory deletes failed attempts older than AttemptHistory, at most once a
// minute and a bounded number of rows at a time (the next sweeps take the rest).
func (w *Worker) pruneAttemptHistory(ctx context.Context) {
	if !w.history || time.Since(w.prunedAt) < time.Minute {
		return
	}
	w.prunedAt = time.Now()
	if _, err := schema.PruneAttemptHistory(ctx, w.cfg.Pool, w.cfg.AttemptHistory, 10000); err != nil && ctx.Err() == nil {
		w.log.Warn("pruning the attempt history failed", "error", err)
	}
}

// wakeAfterRetry polls the flow when pgflow makes a retried task visible again:
// floor(base_delay * 2^attempts) seconds after the failure.
func (w *Worker) wakeAfterRetry(fs *flowState, step string, attempts int) {
	st := fs.steps[step]
	if st == nil {
		return
	}
	delay := time.Duration(float64(st.baseDelay)*float64(uint64(1)<<min(attempts, 30))) * time.Second
	time.AfterFunc(delay+50*time.Millisecond, fs.ring)
}

func (w *Worker) workerIDs() []string {
	ids := make([]string, len(w.flows))
	for i, fs := range w.flows {
		ids[i] = fs.workerID
	}
	return ids
}

func (w *Worker) allDeprecated() bool {
	for _, fs := range w.flows {
		if !fs.deprecated.Load() {
			return false
		}
	}
	return true
}
