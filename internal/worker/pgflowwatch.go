package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/heartbeat"
	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/requeueguard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// pgflow may be upgraded under a serving worker (`db install --migrations` of a newer
// release, or any other tool's migrations). What the worker prepared for the pgflow it found
// at start then no longer fits: the twins of start_tasks on its connections, whether fetches
// ask for flow_input, the heartbeat's stop call, the requeue guard, the recovery sweep's
// query, the pgflow version handlers see. The watch below notices the change (a catalogue
// fingerprint, read every PgflowCheckInterval, and at once after an error a changed schema
// causes; or a newer migration recorded, where the catalogue did not change), holds the
// fetches, reads the protocol again, prepares for it and fetches again.
// No task is started on a pgflow the worker has not prepared for: `db install` and the
// worker's transactions exclude each other (schema.UpgradeLockShared), a fetch or claim
// refuses to start tasks once a migration it was not prepared for is recorded
// (poller.Fetcher.SetWitness), and a twin of start_tasks refuses to run once its original
// changed (package plans). For other tools' migrations, a single step's input gets "run"
// wherever it lacks it, whatever the protocol (package poller). docs/RATIONALE.md "pgflow
// upgraded under a serving worker".

// upgradeState is the watch's state.
type upgradeState struct {
	// gate: fetches hold it (read) while they run; the watch takes it (write) to halt them,
	// so that none is in flight while it prepares.
	gate   sync.RWMutex
	halted atomic.Bool // no fetch starts: the worker prepares for a changed pgflow, or cannot serve it
	// generation counts the protocols the worker has served: the recovery loop rebuilds its
	// sweeper when it changes.
	generation atomic.Int64
	checkNow   chan struct{} // an error says pgflow may have changed: look at once

	// Only the watch's goroutine touches these once Run serves.
	catalogue string // schema.CatalogueFingerprint of the pgflow the worker prepared for
	// newest and release: schema.NewestMigration then. Fetches refuse to start tasks once
	// another migration is recorded (poller.Fetcher.SetWitness); release names the pgflow.
	newest, release string
	heartbeat       *heartbeat.Service

	lateMu  sync.Mutex
	late    service.Group // services a changed pgflow needs that the first did not (the requeue guard)
	guarded bool          // a requeue guard runs
	closed  bool          // stopLateServices ran: start nothing more
}

// errHalted is returned by fetch while the worker prepares for a changed pgflow.
var errHalted = errors.New("fetching halted: pgflow changed under the worker")

// pgflow is the protocol the worker serves.
func (w *Worker) pgflow() schema.Protocol {
	if p := w.proto.Load(); p != nil {
		return *p
	}
	return schema.Protocol{}
}

// fetch fetches q's tasks unless the worker is halted.
func (w *Worker) fetch(ctx context.Context, q *queueState, n int) ([]fetched.Task, error) {
	w.upgrade.gate.RLock()
	defer w.upgrade.gate.RUnlock()
	if w.upgrade.halted.Load() {
		return nil, errHalted
	}
	return q.fetcher.Fetch(ctx, n)
}

// pgflowSuspect makes the watch look at once when err is one a changed schema causes, and
// reports whether it was.
func (w *Worker) pgflowSuspect(err error) bool {
	if !dberr.SchemaChanged(err) {
		return false
	}
	select {
	case w.upgrade.checkNow <- struct{}{}:
	default:
	}
	return true
}

// pgflowWatch looks every PgflowCheckInterval, or when an error asks, whether the catalogue
// still is the one the worker prepared for, and prepares for the new one when it is not.
func (w *Worker) pgflowWatch(ctx context.Context) {
	for {
		var tick <-chan time.Time
		if w.cfg.PgflowCheckInterval > 0 {
			tick = time.After(w.cfg.PgflowCheckInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-w.upgrade.checkNow:
		}
		fp, err := schema.CatalogueFingerprint(ctx, w.cfg.Pool)
		if err != nil {
			continue // an unreachable database is the fetch loops' to report
		}
		// A migration that changes no row of schema pgflow's catalogue (data only, another
		// schema) still makes the fetches refuse to start tasks (their witness is the newest
		// migration): it is a change to prepare for too, or they would refuse for good.
		if fp == w.upgrade.catalogue {
			if newest, _ := schema.NewestMigration(ctx, w.cfg.Pool); newest == w.upgrade.newest {
				continue
			}
		}
		w.reprepare(ctx, fp)
	}
}

// reprepare halts the fetches, reads the protocol of the changed catalogue fp and, when the
// worker speaks it, prepares for it and fetches again; otherwise it stays halted, saying why,
// until the catalogue changes again.
func (w *Worker) reprepare(ctx context.Context, fp string) {
	u := &w.upgrade
	began := time.Now()
	old := w.pgflow()
	u.gate.Lock() // waits for the fetches in flight
	u.halted.Store(true)
	u.gate.Unlock()
	// Read before the protocol: a migration recorded after it is one the fetches refuse.
	newest, release := schema.NewestMigration(ctx, w.cfg.Pool)
	from, to := pgflowName(old, u.release), pgflowName(schema.Protocol{}, release)
	w.cfg.Health.SetWaiting(fmt.Sprintf("pgflow changed from %s to %s: re-preparing", from, to))
	w.log.Info("pgflow changed under the worker: fetching halted while it prepares for the new pgflow", "from", from, "to", to)

	proto, err := schema.DetectPgflow(ctx, w.cfg.Pool)
	if err != nil {
		// The next look tries again: the catalogue is not taken as seen.
		w.cfg.Health.SetWaiting(fmt.Sprintf("pgflow changed from %s to %s: re-preparing (reading the new pgflow failed: %v)", from, to, err))
		w.log.Warn("reading the changed pgflow failed; trying again", "error", err)
		w.retrySoon(ctx)
		return
	}
	to = pgflowName(proto, release)
	if err := proto.Supported(); err != nil {
		u.catalogue, u.newest = fp, newest // halted until pgflow changes again
		w.cfg.Health.SetWaiting(fmt.Sprintf("pgflow changed from %s to %s, which this worker cannot serve: %v; "+
			"waiting for pgflow to change again (or deploy a pgflow-wasm that speaks it)", from, to, err))
		w.log.Error("pgflow changed to one this worker cannot serve: no task is fetched until it changes again", "from", from, "to", to,
			"error", err, "fix", "finish the upgrade, or deploy a pgflow-wasm that speaks this pgflow")
		return
	}
	// New sessions: their twins of start_tasks are made from the new body, and no statement
	// prepared for the old catalogue is kept. Connections in use close once released.
	w.cfg.Pool.Reset()
	w.proto.Store(&proto)
	for _, fs := range w.flows {
		for _, q := range fs.queues {
			q.fetcher.SetProtocol(proto.QueueNames, proto.Lifecycle, proto.FlowInput)
			q.fetcher.SetWitness(newest)
		}
	}
	if u.heartbeat != nil {
		u.heartbeat.SetStoppedAt(proto.StoppedAt)
	}
	if proto.StartModes && !old.StartModes {
		if _, err := w.cfg.Pool.Exec(ctx, `select pgflow.track_worker_function($1, 'process')`, liveness.FunctionName); err != nil {
			w.log.Warn("registering as a process worker (pgflow.track_worker_function) failed: pgflow's ensure_workers may try to wake this worker over HTTP",
				"error", err, "fix", "restart the worker, which registers at start")
		}
	}
	if g := w.requeueGuard(proto); g != nil {
		w.startLate(ctx, g)
	}
	u.generation.Add(1)
	u.catalogue, u.newest, u.release = fp, newest, release
	u.halted.Store(false)
	w.cfg.Health.SetWaiting("")
	for _, fs := range w.flows {
		fs.ring()
	}
	w.log.Info("serving again on the changed pgflow", "from", from, "to", to, "protocol", proto.String(),
		"halted_for", time.Since(began).Round(time.Millisecond))
}

// retrySoon makes the watch look again shortly.
func (w *Worker) retrySoon(ctx context.Context) {
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
			select {
			case w.upgrade.checkNow <- struct{}{}:
			default:
			}
		}
	}()
}

// pgflowName names a pgflow for messages: the release whose migrations `db install` applied
// last, and the protocol its catalogue speaks where known (a release being applied migration
// by migration speaks the protocol of one before it until its last one commits).
func pgflowName(p schema.Protocol, release string) string {
	known := p.Installed() || p.Newer != ""
	switch {
	case release != "" && known:
		return release + " (protocol " + p.String() + ")"
	case release != "":
		return release
	case known:
		return p.String()
	}
	return "another release"
}

// requeueGuard is the requeue guard the protocol needs (pgflow 0.13.2+), once per worker;
// nil when it needs none, the configuration turns it off, or one runs.
func (w *Worker) requeueGuard(proto schema.Protocol) service.Service {
	u := &w.upgrade
	u.lateMu.Lock()
	defer u.lateMu.Unlock()
	if !proto.Requeue || w.cfg.RequeueGuardAfter <= 0 || u.guarded {
		return nil
	}
	u.guarded = true
	return requeueguard.New(requeueguard.Config{Pool: w.cfg.Pool, Interval: w.cfg.RequeueGuardInterval,
		After: w.cfg.RequeueGuardAfter, StartedBefore: w.known.startedBefore, Log: w.log})
}

// startLate starts a service a changed pgflow needs, unless the worker is stopping.
func (w *Worker) startLate(ctx context.Context, s service.Service) {
	u := &w.upgrade
	u.lateMu.Lock()
	defer u.lateMu.Unlock()
	if u.closed {
		return
	}
	if err := u.late.Start(ctx, s); err != nil {
		w.log.Warn("starting a part the changed pgflow needs failed", "error", err, "fix", "restart the worker")
	}
}

// stopLateServices stops what startLate started; nothing starts after it.
func (w *Worker) stopLateServices() {
	u := &w.upgrade
	u.lateMu.Lock()
	u.closed = true
	u.lateMu.Unlock()
	u.late.Stop()
}
