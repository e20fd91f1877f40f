package schedule_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// Two workers' schedulers on one database, started a second apart, with `@every 2s`: one run
// per tick between them, each tick an even second on the wall clock. (Each timing the interval
// from its own start made two runs per interval.)
func TestAnIntervalStartsOneRunPerTickAcrossWorkers(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `select pgflow.create_flow('ticking'); select pgflow.add_step('ticking', 's')`); err != nil {
		t.Fatal(err)
	}
	spec, err := flowfile.ParseSchedule("@every 2s", "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	results := map[schedule.TickResult]int{}
	start := func(workerID string) *schedule.Scheduler {
		s := schedule.New(schedule.Config{Pool: db.Pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Flows: []schedule.Flow{{Slug: "ticking", Spec: spec, WorkerID: workerID}},
			StartRun: func(ctx context.Context, tx pgx.Tx, flow string, input json.RawMessage) (string, error) {
				return store.Start(ctx, tx, flow, input)
			},
			OnTick: func(flow string, r schedule.TickResult) {
				mu.Lock()
				results[r]++
				mu.Unlock()
			}})
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s
	}
	// Started in different seconds, so that timing from its start, each would tick on
	// seconds the other does not.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 300*time.Millisecond)))
	a := start("00000000-0000-4000-8000-00000000000a")
	time.Sleep(time.Second)
	b := start("00000000-0000-4000-8000-00000000000b")
	time.Sleep(5 * time.Second)
	a.Stop()
	b.Stop()

	rows, err := db.Pool.Query(ctx, `select t.tick, t.started_by::text, r.run_id is not null
		from pgflow_wasm.schedule_ticks t left join pgflow.runs r using (run_id)
		where t.flow_slug = 'ticking' order by t.tick`)
	if err != nil {
		t.Fatal(err)
	}
	ticks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		at  time.Time
		by  string
		run bool
	}, error) {
		var v struct {
			at  time.Time
			by  string
			run bool
		}
		return v, r.Scan(&v.at, &v.by, &v.run)
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'ticking'`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for i, tk := range ticks {
		by[tk.by]++
		if tk.at.UnixNano()%int64(2*time.Second) != 0 || !tk.run {
			t.Errorf("tick %s (run %v): want an even second with its run", tk.at.Format(time.TimeOnly+".000"), tk.run)
		}
		if i > 0 && tk.at.Sub(ticks[i-1].at) != 2*time.Second {
			t.Errorf("ticks %s and %s: want one every 2 s", ticks[i-1].at.Format(time.TimeOnly+".000"), tk.at.Format(time.TimeOnly+".000"))
		}
	}
	t.Logf("%d ticks, %d runs, claimed by worker: %v", len(ticks), runs, by)
	// 6 s from the first scheduler's start: 3 even seconds (2 or 4 at a slow start's edges).
	if runs != len(ticks) || len(ticks) < 2 || len(ticks) > 4 {
		t.Errorf("%d ticks and %d runs in 6 s of @every 2s on two workers: want one run per tick, 3", len(ticks), runs)
	}
	// Each tick is reported started by the worker that claimed it and taken by the other,
	// where both reached it (b serves the last 5 s: at least one tick).
	mu.Lock()
	defer mu.Unlock()
	if results[schedule.TickStarted] != len(ticks) || results[schedule.TickTaken] < 1 || results[schedule.TickMissed] != 0 {
		t.Errorf("tick results %v for %d ticks: want each started once, at least one taken, none missed", results, len(ticks))
	}
}

// A tick whose run cannot be started (here the flow is not in the database, a refusal as
// real as an outage's) is retried until the tick's grace runs out, then reported missed.
func TestATickNotStartedWithinItsGraceIsMissed(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	spec, err := flowfile.ParseSchedule("@every 1s", "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	results := map[schedule.TickResult]int{}
	s := schedule.New(schedule.Config{Pool: db.Pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Grace: 300 * time.Millisecond,
		Flows: []schedule.Flow{{Slug: "not_compiled", Spec: spec, WorkerID: "00000000-0000-4000-8000-00000000000c"}},
		StartRun: func(ctx context.Context, tx pgx.Tx, flow string, input json.RawMessage) (string, error) {
			return store.Start(ctx, tx, flow, input)
		},
		OnTick: func(flow string, r schedule.TickResult) {
			mu.Lock()
			results[r]++
			mu.Unlock()
		}})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond)
	s.Stop()
	mu.Lock()
	defer mu.Unlock()
	if results[schedule.TickMissed] < 1 || results[schedule.TickStarted] != 0 {
		t.Errorf("tick results %v: want ticks missed and none started", results)
	}
}
