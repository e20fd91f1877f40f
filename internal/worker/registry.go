package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/internal/recovery"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// checkSchema reads which pgflow the database has (schema.DetectPgflow) and refuses one this
// worker does not speak: never run a flow on a protocol guess.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) (schema.Protocol, error) {
	proto, err := schema.DetectPgflow(ctx, pool)
	if err != nil {
		return proto, err
	}
	return proto, proto.Supported()
}

// loadEffectiveOptions reads each step's timeout and base delay as pgflow applies them (the
// step's option, else the flow's), so timeouts and retry wake-ups match what pgflow does even
// when the file's options were not written (compile without --update-options).
func (w *Worker) loadEffectiveOptions(ctx context.Context) error {
	for _, fs := range w.flows {
		rows, err := w.cfg.Pool.Query(ctx, `
			select s.step_slug, coalesce(s.opt_timeout, f.opt_timeout), coalesce(s.opt_base_delay, f.opt_base_delay)
			from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug where s.flow_slug = $1`, fs.def.Slug)
		if err != nil {
			return fmt.Errorf("reading options of flow %s: %w", fs.def.Slug, err)
		}
		found := 0
		for rows.Next() {
			var slug string
			var timeout, baseDelay int
			if err := rows.Scan(&slug, &timeout, &baseDelay); err != nil {
				rows.Close()
				return err
			}
			if st := fs.steps[slug]; st != nil {
				st.timeout = time.Duration(timeout) * time.Second
				st.baseDelay = baseDelay
				found++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if found != len(fs.steps) {
			return fmt.Errorf("flow %s is not compiled into this database: run `pgflow-wasm compile` (serve does it first)", fs.def.Slug)
		}
		// A started task's message stays hidden while its handler may run: timeout + 2 s, as
		// pgflow intends. The read gives every message the longest step's visibility, so
		// only messages of shorter steps need a second write.
		visibility := map[string]int{}
		longest := 0
		for slug, st := range fs.steps {
			visibility[slug] = int(st.timeout/time.Second) + 2
			longest = max(longest, visibility[slug])
		}
		mapSteps := map[string]bool{}
		for _, s := range fs.def.Steps {
			mapSteps[s.Slug] = s.Type == flowfile.StepMap
		}
		fs.fetcher = poller.NewFetcher(w.cfg.Pool, poller.FetcherConfig{
			Flow:      fs.def.Slug,
			WorkerID:  fs.workerID,
			FlowInput: w.proto.FlowInput,
			MapStep:   func(step string) bool { return mapSteps[step] },
			ReadVT:    longest,
			Visibility: func(step string) int {
				if v, ok := visibility[step]; ok {
					return v
				}
				return longest
			},
		})
	}
	return nil
}

// prepareSignal turns on insert notifications for every flow queue in notify mode and returns
// the listener; nil in polling mode (or when no queue can notify). A queue that cannot notify
// (no privilege to add the trigger, say) is polled instead, with one warning: the worker
// never refuses to start over how it learns about new tasks.
func (w *Worker) prepareSignal(ctx context.Context) (*poller.Listener, error) {
	if w.cfg.Signal != SignalNotify {
		return nil, nil
	}
	channels := map[string]poller.Wake{}
	for _, fs := range w.flows {
		how, err := poller.EnableInsertNotify(ctx, w.cfg.Pool, fs.def.Slug)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			w.log.Warn("notify: this queue cannot notify on inserts; polling it instead", "flow", fs.def.Slug, "error", err)
			continue
		}
		w.log.Debug("notify: queue inserts notify", "flow", fs.def.Slug, "how", how)
		fs.notified = true
		channels[poller.InsertChannel(fs.def.Slug)] = fs.wake
	}
	if len(channels) == 0 {
		return nil, nil
	}
	return poller.NewListener(w.cfg.Pool.Config().ConnConfig.Copy(), channels, w.log), nil
}

// register inserts one pgflow.workers row per flow. It must precede any start_tasks:
// step_tasks.last_worker_id references pgflow.workers.
func (w *Worker) register(ctx context.Context, db execer) error {
	for _, fs := range w.flows {
		if _, err := db.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name)
			values ($1::uuid, $2, $3) on conflict (worker_id) do nothing`, fs.workerID, fs.def.Slug, liveness.FunctionName); err != nil {
			return fmt.Errorf("registering worker for flow %s: %w", fs.def.Slug, err)
		}
	}
	return nil
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// connectLiveness opens the session that proves this process alive (package liveness): it
// registers the worker rows, takes one advisory lock per row and heartbeats at once. The
// session lives as long as the worker; when the process dies the server drops the locks and
// any sweeper knows within seconds.
func (w *Worker) connectLiveness(ctx context.Context) (*pgx.Conn, error) {
	cfg := w.cfg.Pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "pgflow-wasm liveness"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*pgx.Conn, error) {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := w.register(ctx, conn); err != nil {
		return fail(err)
	}
	for _, fs := range w.flows {
		key, err := liveness.LockKey(fs.workerID)
		if err != nil {
			return fail(err)
		}
		var got bool
		if err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1::int4, $2::int4)`, liveness.LockClass, key).Scan(&got); err != nil {
			return fail(fmt.Errorf("taking the liveness lock of worker %s: %w", fs.workerID, err))
		}
		if !got {
			// Another live worker's id shares the key's bytes: this one is then judged by its
			// heartbeat alone, as before liveness locks existed.
			w.log.Warn("the liveness lock of this worker is held by another session; its death will be noticed by heartbeat only",
				"flow", fs.def.Slug, "worker_id", fs.workerID)
		}
	}
	if _, err := w.heartbeat(ctx, conn); err != nil {
		return fail(err)
	}
	return conn, nil
}

// heartbeatLoop beats every flow's worker row in one statement on the liveness session,
// reconnecting it (and so retaking the locks) at once when it breaks; re-registers rows that
// were deleted; and drains flows whose row an operator marked deprecated.
func (w *Worker) heartbeatLoop(ctx context.Context, conn *pgx.Conn) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background()) // releases the liveness locks
		}
	}()
	retry := poller.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		wait := t.C
		var reconnect <-chan time.Time
		if conn == nil {
			reconnect = time.After(retry.Next())
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		case <-reconnect:
		}
		if conn == nil {
			c, err := w.connectLiveness(ctx)
			w.cfg.Health.SetDatabase(err == nil)
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("liveness session: reconnecting failed", "error", err)
				}
				continue
			}
			conn = c
			retry.Reset()
			w.log.Info("liveness session reconnected: locks retaken")
			continue
		}
		seen, err := w.heartbeat(ctx, conn)
		w.cfg.Health.SetDatabase(err == nil)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("heartbeat failed; reconnecting the liveness session", "error", err)
			}
			conn.Close(context.Background())
			conn = nil
			continue
		}
		if seen < len(w.flows) {
			w.log.Warn("worker rows were missing from pgflow.workers; registering them again")
			if err := w.register(ctx, conn); err != nil {
				w.log.Warn("re-registering failed", "error", err)
			}
		}
		if w.allDeprecated() {
			w.log.Info("every flow of this worker is deprecated: stopping")
			w.Stop()
		}
	}
}

// heartbeat touches every flow's worker row and returns how many rows it found.
func (w *Worker) heartbeat(ctx context.Context, conn *pgx.Conn) (int, error) {
	rows, err := conn.Query(ctx, `update pgflow.workers set last_heartbeat_at = clock_timestamp()
		where worker_id = any($1::text[]::uuid[]) returning worker_id::text, deprecated_at is not null`, w.workerIDs())
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var id string
		var deprecated bool
		if err := rows.Scan(&id, &deprecated); err != nil {
			return 0, err
		}
		seen++
		if fs := w.byWorker[id]; fs != nil && deprecated && !fs.deprecated.Swap(true) {
			w.log.Info("flow deprecated for this worker: no new tasks; running ones finish", "flow", fs.def.Slug, "worker_id", id)
		}
	}
	return seen, rows.Err()
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

// deprecate marks this worker's rows as stopped, so operators and dashboards see it gone.
func (w *Worker) deprecate() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.cfg.Pool.Exec(ctx, `update pgflow.workers set deprecated_at = coalesce(deprecated_at, clock_timestamp())
		where worker_id = any($1::text[]::uuid[])`, w.workerIDs()); err != nil {
		w.log.Warn("could not mark worker rows deprecated", "error", err)
	}
	// pgflow 0.10+ tells stopped workers apart (workers.stopped_at), as its own worker does
	// on exit. (track_worker_function is never called: it would make ensure_workers() send
	// HTTP wake-ups meant for Supabase Edge Functions.)
	if w.proto.StoppedAt {
		for _, id := range w.workerIDs() {
			if _, err := w.cfg.Pool.Exec(ctx, `select pgflow.mark_worker_stopped($1::text::uuid)`, id); err != nil {
				w.log.Warn("could not mark the worker stopped", "worker_id", id, "error", err)
			}
		}
	}
}

// recoveryLoop sweeps for stalled tasks at start (a previous worker may have died moments
// ago) and then every RecoveryInterval.
func (w *Worker) recoveryLoop(ctx context.Context) {
	cfg := recovery.Config{WorkerStaleAfter: w.cfg.WorkerStaleAfter, StartedMargin: w.cfg.StalledMargin,
		LivenessGrace: w.cfg.LivenessGrace, ForeignStaleAfter: max(w.cfg.ForeignStaleAfter, 0), Self: w.workerIDs(),
		PermanentlyStalled: w.proto.Requeue, AttemptHistory: w.history}
	for _, fs := range w.flows {
		cfg.Flows = append(cfg.Flows, fs.def.Slug)
	}
	sweeper := recovery.NewSweeper(w.cfg.Pool, cfg)
	next := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		next = w.cfg.RecoveryInterval
		w.pruneAttemptHistory(ctx)
		gens := w.fetchGenerations()
		got, own, err := sweeper.SweepOwn(ctx)
		w.handBackOrphans(ctx, own, gens)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("stalled-task sweep failed", "error", err)
			}
			continue
		}
		for _, r := range got {
			fs := w.byFlow[r.FlowSlug]
			w.log.Warn("recovered a stalled task", "run_id", r.RunID, "flow", r.FlowSlug, "step", r.StepSlug,
				"task_index", r.TaskIndex, "status", r.Status, "attempts", r.Attempts, "reason", r.Reason)
			if m := w.cfg.Metrics; m != nil {
				m.Recovered.WithLabelValues(r.FlowSlug).Inc()
			}
			if fs != nil && r.Status == "queued" {
				w.wakeAfterRetry(fs, r.StepSlug, r.Attempts)
			}
		}
	}
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
	time.AfterFunc(delay+50*time.Millisecond, fs.wake.Ring)
}
