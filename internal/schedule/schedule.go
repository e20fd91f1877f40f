// Package schedule starts runs of flows on a cron schedule (flows.yaml `schedule:`), exactly
// once per tick however many workers serve the flow.
//
// No leader decides: at each tick every worker that serves the flow tries to insert the row
// (flow, tick) into pgflow_wasm.schedule_ticks, and the one whose insert lands starts the run
// in the same transaction. A worker that dies at any point leaves either no row (another
// worker, or itself after a restart within the tick's grace, claims the tick) or a row with
// its run: never two runs, never a row without its run.
//
// Ticks missed while no worker ran: `missed: none` (the default) starts nothing for them;
// `missed: one` starts one run for the latest missed tick when a worker comes back (claimed
// through the same row, so once).
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
)

// Flow is one scheduled flow.
type Flow struct {
	Slug     string
	Spec     *flowfile.Schedule
	WorkerID string // the pgflow.workers row of the worker serving it, recorded with each tick it claims
}

// Config configures a Scheduler.
type Config struct {
	Pool  *pgxpool.Pool
	Flows []Flow
	Log   *slog.Logger
	// StartRun starts a run inside tx (so the tick's row and its run commit together).
	StartRun func(ctx context.Context, tx pgx.Tx, flow string, input json.RawMessage) (string, error)
	// Grace is how long after a tick a worker still claims it (one that was down at the
	// tick, or could not reach the database) [1 minute].
	Grace time.Duration
	// OnStarted is told each run this worker started on schedule.
	OnStarted func(flow string, tick time.Time, runID string)
	// OnTick is told how each tick this worker reached ended: TickStarted, TickTaken or
	// TickMissed.
	OnTick func(flow string, result TickResult)
}

// TickResult is how a tick ended for one worker.
type TickResult string

// Tick results.
const (
	TickStarted TickResult = "started" // this worker started the tick's run
	TickTaken   TickResult = "taken"   // another worker had claimed the tick
	TickMissed  TickResult = "missed"  // no run started by this worker within the grace
)

func (s *Scheduler) tick(flow string, r TickResult) {
	if s.cfg.OnTick != nil {
		s.cfg.OnTick(flow, r)
	}
}

// Scheduler is a service (package service): one loop per scheduled flow.
type Scheduler struct {
	service.State
	cfg   Config
	loops []*service.Loop
}

// New returns a Scheduler; it does nothing before Start.
func New(cfg Config) *Scheduler {
	if cfg.Grace <= 0 {
		cfg.Grace = time.Minute
	}
	s := &Scheduler{cfg: cfg}
	for _, f := range cfg.Flows {
		s.loops = append(s.loops, service.NewLoop(func(ctx context.Context) { s.run(ctx, f) }))
	}
	return s
}

// Start makes sure the tick table exists and starts every flow's loop.
func (s *Scheduler) Start(ctx context.Context) error {
	if len(s.loops) == 0 {
		s.SetStarted()
		return nil
	}
	if err := EnsureTable(ctx, s.cfg.Pool); err != nil {
		return fmt.Errorf("schedules need pgflow_wasm.schedule_ticks: %w", err)
	}
	for _, l := range s.loops {
		_ = l.Start(ctx)
	}
	s.SetStarted()
	return nil
}

// Stop ends every loop.
func (s *Scheduler) Stop() {
	for _, l := range s.loops {
		l.Stop()
	}
	s.SetStopped()
}

// run claims each tick of one flow as it comes.
func (s *Scheduler) run(ctx context.Context, f Flow) {
	log := s.cfg.Log.With("flow", f.Slug, "schedule", f.Spec.Cron)
	if f.Spec.CatchUp {
		s.catchUp(ctx, f, log)
	}
	next := f.Spec.Next(time.Now())
	retry := kit.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		err := s.claim(ctx, f, next, log)
		switch {
		case err == nil || errors.Is(err, errTaken):
			if err == nil {
				s.tick(f.Slug, TickStarted)
			} else {
				s.tick(f.Slug, TickTaken)
			}
			retry.Reset()
			next = f.Spec.Next(next)
		case ctx.Err() != nil:
			return
		case time.Since(next) > s.cfg.Grace:
			s.tick(f.Slug, TickMissed)
			log.Warn("a scheduled run was not started: the database did not answer within the tick's grace", "tick", next, "error", err)
			retry.Reset()
			next = f.Spec.Next(time.Now())
		default:
			wait := retry.Next()
			log.Warn("starting a scheduled run failed; retrying", "tick", next, "error", err, "retry_in", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}

// catchUp starts one run for the latest tick missed since the last one recorded, when the
// flow says `missed: one`.
func (s *Scheduler) catchUp(ctx context.Context, f Flow, log *slog.Logger) {
	var last *time.Time
	if err := s.cfg.Pool.QueryRow(ctx, `select max(tick) from pgflow_wasm.schedule_ticks where flow_slug = $1`, f.Slug).Scan(&last); err != nil || last == nil {
		return // never ran: nothing was missed
	}
	var missed time.Time
	for t := f.Spec.Next(*last); !t.After(time.Now()); t = f.Spec.Next(t) {
		missed = t
	}
	if missed.IsZero() {
		return
	}
	if err := s.claim(ctx, f, missed, log.With("catch_up", true)); err != nil && !errors.Is(err, errTaken) && ctx.Err() == nil {
		log.Warn("the catch-up run of a missed tick was not started", "tick", missed, "error", err)
	}
}

var errTaken = errors.New("another worker claimed the tick")

// claim inserts the tick's row and starts its run in one transaction; errTaken when another
// worker's row is there.
func (s *Scheduler) claim(ctx context.Context, f Flow, tick time.Time, log *slog.Logger) error {
	var runID string
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `insert into pgflow_wasm.schedule_ticks (flow_slug, tick, started_by) values ($1, $2, $3::text::uuid)
			on conflict do nothing`, f.Slug, tick.UTC(), f.WorkerID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errTaken
		}
		if runID, err = s.cfg.StartRun(ctx, tx, f.Slug, f.Spec.Input); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `update pgflow_wasm.schedule_ticks set run_id = $3::text::uuid where flow_slug = $1 and tick = $2`,
			f.Slug, tick.UTC(), runID)
		return err
	})
	if err != nil {
		if !errors.Is(err, errTaken) && !dberr.Transient(err) {
			err = fmt.Errorf("%w (%s)", err, dberr.Describe(err))
		}
		return err
	}
	log.Info("started a scheduled run", "tick", tick, "run_id", runID)
	if s.cfg.OnStarted != nil {
		s.cfg.OnStarted(f.Slug, tick, runID)
	}
	return nil
}
