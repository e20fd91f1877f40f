package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
)

// Worker is one pgflow.workers row (pgflow-wasm registers one per flow it serves).
type Worker struct {
	ID            string
	Queue         string // the flow it serves
	Function      string // "pgflow-wasm" for ours, the edge function's name for pgflow's own
	StartedAt     time.Time
	LastHeartbeat time.Time
	DeprecatedAt  *time.Time
	StoppedAt     *time.Time // pgflow 0.10+ only
	HeartbeatAge  time.Duration
	// Alive: the worker beat within the store's StaleAfter and has not stopped
	// (liveness.AliveSQL, the rule recovery and `start` judge by too).
	Alive   bool
	Running int // tasks started by it and not finished
}

// aliveSQL is liveness.AliveSQL for the pgflow.workers row w, with this store's threshold and
// protocol.
func (s *Store) aliveSQL(w string) string {
	return liveness.AliveSQL(w, fmt.Sprintf("%g", s.staleAfter.Seconds()), s.proto.StoppedAt)
}

// WorkerPage is a page of workers, most recent heartbeat first.
type WorkerPage struct {
	Workers []Worker
	Older   string // cursor of the next page, "" on the last
	Now     time.Time
}

// Workers reads a page of workers after the cursor ("" for the first page); workers that beat
// most recently (the live ones) come first.
func (s *Store) Workers(ctx context.Context, cursor string, limit int) (WorkerPage, error) {
	if limit <= 0 {
		limit = 100
	}
	stopped := "null::timestamptz"
	if s.proto.StoppedAt {
		stopped = "w.stopped_at"
	}
	args := pgx.NamedArgs{"limit": limit + 1}
	where := ""
	if cursor != "" {
		c, err := ParseCursor(cursor)
		if err != nil {
			return WorkerPage{}, err
		}
		where = "where (w.last_heartbeat_at, w.worker_id) < (@at, @id::uuid)"
		args["at"], args["id"] = c.StartedAt, c.RunID
	}
	var page WorkerPage
	if err := s.pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&page.Now); err != nil {
		return page, err
	}
	rows, err := s.pool.Query(ctx, `select w.worker_id::text, w.queue_name, w.function_name, w.started_at, w.last_heartbeat_at,
		       w.deprecated_at, `+stopped+`, extract(epoch from clock_timestamp() - w.last_heartbeat_at)::float8, `+s.aliveSQL("w")+`
		from pgflow.workers w `+where+`
		order by w.last_heartbeat_at desc, w.worker_id desc limit @limit`, args)
	if err != nil {
		return page, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Worker, error) {
		var w Worker
		var age float64
		err := row.Scan(&w.ID, &w.Queue, &w.Function, &w.StartedAt, &w.LastHeartbeat, &w.DeprecatedAt, &w.StoppedAt, &age, &w.Alive)
		w.HeartbeatAge = time.Duration(age * float64(time.Second))
		return w, err
	})
	if err != nil {
		return page, err
	}
	if len(list) > limit {
		list = list[:limit]
		last := list[len(list)-1]
		page.Older = Cursor{last.LastHeartbeat, last.ID}.String()
	}
	ids := make([]string, len(list))
	for i, w := range list {
		ids[i] = w.ID
	}
	// idx_step_tasks_last_worker covers exactly this: started tasks by worker.
	rows, err = s.pool.Query(ctx, `select last_worker_id::text, count(*) from pgflow.step_tasks
		where status = 'started' and last_worker_id = any($1::uuid[]) group by last_worker_id`, ids)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	running := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return page, err
		}
		running[id] = n
	}
	for i := range list {
		list[i].Running = running[list[i].ID]
	}
	page.Workers = list
	return page, rows.Err()
}

// Deprecate sets a worker's deprecated_at: pgflow's workers (and ours) see it at their next
// heartbeat, stop taking tasks of that queue and finish the running ones. It reports false
// when the worker was already deprecated; ErrNotFound when there is no such worker.
func (s *Store) Deprecate(ctx context.Context, id string) (bool, error) {
	workerID, ok := ParseID(id)
	if !ok {
		return false, fmt.Errorf("%q is not a worker id: %w", id, ErrNotFound)
	}
	var changed bool
	err := s.pool.QueryRow(ctx, `with w as (select worker_id, deprecated_at from pgflow.workers where worker_id = $1::uuid),
		u as (update pgflow.workers set deprecated_at = clock_timestamp()
		      where worker_id = $1::uuid and deprecated_at is null returning 1)
		select exists (select 1 from u) from w`, workerID).Scan(&changed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("no worker %s in this database: %w", workerID, ErrNotFound)
	}
	return changed, err
}

// FlowWorkers is what pgflow.workers says about the workers of one flow's queue.
type FlowWorkers struct {
	FlowExists bool
	// Serving counts the workers of the flow that are alive (Worker.Alive), not deprecated and
	// not of a drained process (pgflow_wasm.worker_processes).
	Serving int
	// Drained counts the alive, undeprecated workers of the flow whose process an operator
	// drained: they take none of its tasks until undrained.
	Drained int
	// LastHeartbeat is the newest heartbeat of any worker of the flow that was not
	// deprecated, if any.
	LastHeartbeat *time.Time
}

// FlowWorkers reads who serves flow: the pgflow.workers rows of its queue (named after the
// flow; pgflow-wasm registers one row per flow it serves) that were not deprecated.
func (s *Store) FlowWorkers(ctx context.Context, flow string) (FlowWorkers, error) {
	var w FlowWorkers
	var procs bool
	if err := s.pool.QueryRow(ctx, `select to_regclass('pgflow_wasm.worker_processes') is not null`).Scan(&procs); err != nil {
		return w, fmt.Errorf("reading the workers of flow %s: %w", flow, err)
	}
	drained := "false"
	if procs {
		drained = `exists (select 1 from pgflow_wasm.process_workers pw join pgflow_wasm.worker_processes p on p.process_id = pw.process_id
		                    where pw.worker_id = w.worker_id and p.drained_at is not null)`
	}
	err := s.pool.QueryRow(ctx, `
		select exists (select 1 from pgflow.flows where flow_slug = $1),
		       count(*) filter (where `+s.aliveSQL("w")+` and not `+drained+`),
		       count(*) filter (where `+s.aliveSQL("w")+` and `+drained+`),
		       max(w.last_heartbeat_at)
		from pgflow.workers w where w.queue_name = $1 and w.deprecated_at is null`,
		flow).Scan(&w.FlowExists, &w.Serving, &w.Drained, &w.LastHeartbeat)
	if err != nil {
		return w, fmt.Errorf("reading the workers of flow %s: %w", flow, err)
	}
	return w, nil
}

// NoWorkerWarning says why a run of flow will not move, or "" when a live worker serves it
// (or the flow does not exist, which starting the run reports).
func (w FlowWorkers) NoWorkerWarning(flow string) string {
	if !w.FlowExists || w.Serving > 0 {
		return ""
	}
	last := "no worker has ever served it"
	switch {
	case w.Drained > 0:
		return fmt.Sprintf("no live worker serves flow %s: the %d alive for it belong to drained worker processes; "+
			"the run waits in its queue until one is undrained (`pgflow-wasm worker undrain PROCESS_ID`, or the dashboard's workers page) "+
			"or another worker starts", flow, w.Drained)
	case w.LastHeartbeat != nil:
		last = fmt.Sprintf("the last heartbeat of a worker for it was %s ago", time.Since(*w.LastHeartbeat).Round(time.Second))
	}
	return fmt.Sprintf("no live worker serves flow %s (%s): the run waits in its queue until one starts, e.g. "+
		"`pgflow-wasm serve --flows <the flows.yaml that declares %s>`", flow, last, flow)
}

// Process is a pgflow-wasm worker process (pgflow_wasm.worker_processes) with its worker rows.
type Process struct {
	ID, Host, Version string
	PID               int
	StartedAt         time.Time
	DrainedAt         *time.Time // an operator drained it: it takes no new tasks
	DrainedBy         string
	// Flows are the flows its alive rows that are not deprecated serve, by name.
	Flows         []string
	Rows          int // its pgflow.workers rows, one per flow and reload
	Alive         bool
	LastHeartbeat time.Time
	Running       int // tasks its rows started and did not finish
}

// Processes reads the worker processes, those alive first, then by latest heartbeat
// (none before a pgflow-wasm worker created the tables).
func (s *Store) Processes(ctx context.Context, limit int) ([]Process, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `select to_regclass('pgflow_wasm.process_workers') is not null`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		with r as (select pw.process_id, w.worker_id, w.queue_name, w.last_heartbeat_at, w.deprecated_at, `+s.aliveSQL("w")+` as alive
		           from pgflow_wasm.process_workers pw join pgflow.workers w on w.worker_id = pw.worker_id)
		select p.process_id::text, p.host, p.pid, p.version, p.started_at, p.drained_at, coalesce(p.drained_by, ''),
		       coalesce(array_agg(distinct r.queue_name order by r.queue_name) filter (where r.alive and r.deprecated_at is null), '{}'),
		       count(*), bool_or(r.alive), max(r.last_heartbeat_at),
		       (select count(*) from pgflow.step_tasks t
		         where t.status = 'started' and t.last_worker_id = any (array_agg(r.worker_id)))::int
		from pgflow_wasm.worker_processes p join r on r.process_id = p.process_id
		group by p.process_id
		order by bool_or(r.alive) desc, max(r.last_heartbeat_at) desc, p.process_id
		limit $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Process, error) {
		var p Process
		err := row.Scan(&p.ID, &p.Host, &p.PID, &p.Version, &p.StartedAt, &p.DrainedAt, &p.DrainedBy, &p.Flows, &p.Rows,
			&p.Alive, &p.LastHeartbeat, &p.Running)
		return p, err
	})
}
