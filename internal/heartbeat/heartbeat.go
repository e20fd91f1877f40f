// Package heartbeat keeps a worker's rows in pgflow.workers alive: it registers one row per
// served flow, holds each row's liveness lock (package liveness) on a session of its own,
// touches the rows every interval, registers rows again that someone deleted, tells the
// worker when an operator deprecated one, and on Stop marks the rows deprecated (and, on
// pgflow 0.10+, stopped) before it closes the session, which drops the locks.
package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
)

// Row is one pgflow.workers row: a worker id serving one queue.
type Row struct {
	WorkerID string
	Queue    string
}

// Config configures a Service.
type Config struct {
	Pool     *pgxpool.Pool // its connection settings open the liveness session; its connections mark rows stopped
	Rows     []Row
	Interval time.Duration
	// StoppedAt: the database has pgflow 0.10+'s workers.stopped_at and mark_worker_stopped,
	// which Stop calls as pgflow's own worker does on exit.
	StoppedAt bool
	// ProcessMode: the database has pgflow 0.15.0+'s worker start modes. The worker's
	// function name is registered as a 'process' function, which starts itself: pgflow's
	// ensure_workers() then never sends it the HTTP wake-ups meant for Edge Functions.
	ProcessMode bool
	Log         *slog.Logger
	Health      *telemetry.Health // told whether the database answers
	// OnDeprecated is told, once per row, that an operator set its deprecated_at.
	OnDeprecated func(workerID string)
}

// Service is the heartbeat of a set of worker rows.
type Service struct {
	service.State
	cfg       Config
	stoppedAt atomic.Bool // Config.StoppedAt, or what SetStoppedAt said since
	loop      *service.Loop

	conn *pgx.Conn // the liveness session; only the loop uses it once Start returned
	told map[string]bool
}

// New returns a Service; nothing touches the database before Start.
func New(cfg Config) *Service {
	s := &Service{cfg: cfg, told: map[string]bool{}}
	s.stoppedAt.Store(cfg.StoppedAt)
	s.loop = service.NewLoop(s.run)
	return s
}

// Start registers the rows, takes their liveness locks and beats once; the rows must exist
// before any start_tasks names them (step_tasks.last_worker_id references pgflow.workers).
func (s *Service) Start(ctx context.Context) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return fmt.Errorf("registering the worker: %w", err)
	}
	s.conn = conn
	if err := s.loop.Start(ctx); err != nil {
		return err
	}
	s.SetStarted()
	return nil
}

// Stop ends the heartbeat, marks the rows deprecated (and stopped) so operators and
// dashboards see the worker gone, and closes the liveness session.
func (s *Service) Stop() {
	s.loop.Stop()
	s.markStopped()
	if s.conn != nil {
		s.conn.Close(context.Background()) // releases the liveness locks
		s.conn = nil
	}
	s.SetStopped()
}

func (s *Service) ids() []string {
	ids := make([]string, len(s.cfg.Rows))
	for i, r := range s.cfg.Rows {
		ids[i] = r.WorkerID
	}
	return ids
}

// connect opens the session that proves this process alive: it registers the rows, takes
// one advisory lock per row and heartbeats at once. When the process dies the server drops
// the locks and any sweeper knows within seconds.
func (s *Service) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := kit.OpenSession(ctx, s.cfg.Pool, "pgflow-wasm liveness")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*pgx.Conn, error) {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := s.register(ctx, conn); err != nil {
		return fail(err)
	}
	for _, r := range s.cfg.Rows {
		key, err := liveness.LockKey(r.WorkerID)
		if err != nil {
			return fail(err)
		}
		var got bool
		if err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1::int4, $2::int4)`, liveness.LockClass, key).Scan(&got); err != nil {
			return fail(fmt.Errorf("taking the liveness lock of worker %s: %w", r.WorkerID, err))
		}
		if !got {
			// Another live worker's id shares the key's bytes: this one is then judged by its
			// heartbeat alone, as before liveness locks existed.
			s.cfg.Log.Warn("the liveness lock of this worker is held by another session; its death will be noticed by heartbeat only",
				"queue", r.Queue, "worker_id", r.WorkerID)
		}
	}
	if _, err := s.beat(ctx, conn); err != nil {
		return fail(err)
	}
	return conn, nil
}

// register inserts the rows that are missing.
func (s *Service) register(ctx context.Context, conn *pgx.Conn) error {
	if s.cfg.ProcessMode {
		if _, err := conn.Exec(ctx, `select pgflow.track_worker_function($1, 'process')`, liveness.FunctionName); err != nil {
			return fmt.Errorf("registering %s as a process worker (pgflow.track_worker_function): %w", liveness.FunctionName, err)
		}
	}
	for _, r := range s.cfg.Rows {
		if _, err := conn.Exec(ctx, `insert into pgflow.workers (worker_id, queue_name, function_name)
			values ($1::uuid, $2, $3) on conflict (worker_id) do nothing`, r.WorkerID, r.Queue, liveness.FunctionName); err != nil {
			return fmt.Errorf("registering worker for queue %s: %w", r.Queue, err)
		}
	}
	return nil
}

// run beats every interval on the liveness session, reconnecting it (and so retaking the
// locks) at once when it breaks.
func (s *Service) run(ctx context.Context) {
	conn := s.conn
	retry := kit.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	defer func() { s.conn = conn }() // Stop closes what is left
	for {
		var reconnect <-chan time.Time
		if conn == nil {
			reconnect = time.After(retry.Next())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-reconnect:
		}
		if conn == nil {
			c, err := s.connect(ctx)
			s.cfg.Health.SetDatabase(err == nil)
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Log.Warn("liveness session: reconnecting failed", "error", err)
				}
				continue
			}
			conn = c
			retry.Reset()
			s.cfg.Log.Info("liveness session reconnected: locks retaken")
			continue
		}
		seen, err := s.beat(ctx, conn)
		s.cfg.Health.SetDatabase(err == nil)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.Warn("heartbeat failed; reconnecting the liveness session", "error", err)
			}
			conn.Close(context.Background())
			conn = nil
			continue
		}
		if seen < len(s.cfg.Rows) {
			s.cfg.Log.Warn("worker rows were missing from pgflow.workers; registering them again")
			if err := s.register(ctx, conn); err != nil {
				s.cfg.Log.Warn("re-registering failed", "error", err)
			}
		}
	}
}

// beat touches every row in one statement and returns how many it found.
func (s *Service) beat(ctx context.Context, conn *pgx.Conn) (int, error) {
	rows, err := conn.Query(ctx, `update pgflow.workers set last_heartbeat_at = clock_timestamp()
		where worker_id = any($1::text[]::uuid[]) returning worker_id::text, deprecated_at is not null`, s.ids())
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	seen := 0
	var deprecated []string
	for rows.Next() {
		var id string
		var dep bool
		if err := rows.Scan(&id, &dep); err != nil {
			return 0, err
		}
		seen++
		if dep && !s.told[id] {
			s.told[id] = true
			deprecated = append(deprecated, id)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, id := range deprecated {
		if s.cfg.OnDeprecated != nil {
			s.cfg.OnDeprecated(id)
		}
	}
	return seen, nil
}

// stopWindow bounds how long Stop keeps trying to mark the rows while the database is away.
const stopWindow = 5 * time.Second

// markStopped sets deprecated_at (and on pgflow 0.10+ stopped_at, through pgflow's
// mark_worker_stopped, as its own worker does on exit), retrying a lost connection within
// stopWindow. (track_worker_function is never called: it would make ensure_workers() send
// HTTP wake-ups meant for Supabase Edge Functions.)
func (s *Service) markStopped() {
	ctx, cancel := context.WithTimeout(context.Background(), stopWindow)
	defer cancel()
	retry := kit.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for {
		err := s.markOnce(ctx)
		if err == nil {
			return
		}
		if !dberr.Transient(err) || ctx.Err() != nil {
			s.cfg.Log.Warn("could not mark the worker rows stopped; they go stale by heartbeat instead", "error", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry.Next()):
		}
	}
}

func (s *Service) markOnce(ctx context.Context) error {
	if _, err := s.cfg.Pool.Exec(ctx, `update pgflow.workers set deprecated_at = coalesce(deprecated_at, clock_timestamp())
		where worker_id = any($1::text[]::uuid[])`, s.ids()); err != nil {
		return err
	}
	if !s.stoppedAt.Load() {
		return nil
	}
	for _, id := range s.ids() {
		if _, err := s.cfg.Pool.Exec(ctx, `select pgflow.mark_worker_stopped($1::text::uuid)`, id); err != nil {
			return err
		}
	}
	return nil
}

// SetStoppedAt changes Config.StoppedAt: pgflow was upgraded under the worker.
func (s *Service) SetStoppedAt(v bool) { s.stoppedAt.Store(v) }
