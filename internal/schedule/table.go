package schedule

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// EnsureTable creates pgflow_wasm.schedule_ticks when it is missing: one row per flow and
// tick, the tick's run, and which worker started it.
func EnsureTable(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `select to_regclass('pgflow_wasm.schedule_ticks') is not null`).Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, schema.LockKeyScheduleTable); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			create schema if not exists pgflow_wasm;
			create table if not exists pgflow_wasm.schedule_ticks (
			  flow_slug  text        not null,
			  tick       timestamptz not null,
			  run_id     uuid,
			  started_by uuid,
			  started_at timestamptz not null default now(),
			  primary key (flow_slug, tick));
			comment on table pgflow_wasm.schedule_ticks is
			  'pgflow-wasm: one row per flow and cron tick; the worker whose insert lands starts the tick''s run in the same transaction'`)
		return err
	})
}

// Ticks is what the database records of one flow's schedule.
type Ticks struct {
	Last      *time.Time // the last tick a run was started for
	LastRunID string
}

// LastTick reads the last tick recorded for flow; a missing table means none.
func LastTick(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, flow string) (Ticks, error) {
	var t Ticks
	var run *string
	err := q.QueryRow(ctx, `select tick, run_id::text from pgflow_wasm.schedule_ticks where flow_slug = $1 order by tick desc limit 1`, flow).
		Scan(&t.Last, &run)
	if err == pgx.ErrNoRows {
		return Ticks{}, nil
	}
	if run != nil {
		t.LastRunID = *run
	}
	if err != nil && isUndefinedTable(err) {
		return Ticks{}, nil
	}
	return t, err
}

func isUndefinedTable(err error) bool { return dberr.UndefinedTable(err) }

// FlowTicks is what the database records of one flow's schedule, for a status page.
type FlowTicks struct {
	Flow      string
	Last      time.Time // the last tick a run was started for
	LastRunID string
	LastDay   int // ticks started in the 24 hours before the database's now
}

// Recorded lists every flow that has a tick recorded, by flow slug; a missing table means none.
func Recorded(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]FlowTicks, error) {
	rows, err := q.Query(ctx, `select distinct on (flow_slug) flow_slug, tick, coalesce(run_id::text, ''),
		       (select count(*) from pgflow_wasm.schedule_ticks d where d.flow_slug = t.flow_slug and d.tick > now() - interval '1 day')::int
		from pgflow_wasm.schedule_ticks t order by flow_slug, tick desc`)
	if err != nil {
		if isUndefinedTable(err) {
			return nil, nil
		}
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FlowTicks, error) {
		var f FlowTicks
		err := row.Scan(&f.Flow, &f.Last, &f.LastRunID, &f.LastDay)
		return f, err
	})
	if err != nil && isUndefinedTable(err) {
		return nil, nil
	}
	return out, err
}

// Status is a scheduled flow as `flow list` and the dashboard show it: its schedule, the
// next tick after a moment, and the last tick a run was started for.
type Status struct {
	Flow string
	Spec *flowfile.Schedule
	Next time.Time // in the schedule's time zone
	Ticks
}

// When is the schedule as written: its cron expression, and its time zone unless UTC.
func (s Status) When() string {
	if s.Spec.Location != time.UTC {
		return s.Spec.Cron + " (" + s.Spec.Location.String() + ")"
	}
	return s.Spec.Cron
}

// Describe reads the status of fl's schedule at now; ok is false when fl has none.
func Describe(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, fl *flowfile.Flow, now time.Time) (st Status, ok bool, err error) {
	if fl == nil || fl.Schedule == nil {
		return Status{}, false, nil
	}
	st = Status{Flow: fl.Slug, Spec: fl.Schedule, Next: fl.Schedule.Next(now)}
	if st.Ticks, err = LastTick(ctx, q, fl.Slug); err != nil {
		return Status{}, false, err
	}
	if st.Last != nil {
		l := st.Last.In(fl.Schedule.Location)
		st.Last = &l
	}
	return st, true, nil
}
