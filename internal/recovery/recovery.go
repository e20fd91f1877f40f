// Package recovery finds tasks a dead worker left `started` and hands them back to pgflow.
//
// pgflow 0.8 never requeues such tasks: their runs hang forever; 0.13.2+ has
// requeue_stalled_tasks, which puts a task started longer ago than its timeout plus 30 s
// back in the queue without failing it, but only where pg_cron runs it. The sweep puts each
// stalled task back the same way (taskwrite.RequeueOne): the task returns to `queued`, its
// message is visible at once, and no attempt is failed for a fault the handler did not
// cause, so a step with max_attempts 1 survives a killed worker. Requeues are bounded as
// upstream's are; past the bound the task is failed through fail_task with the reason.
//
// When a task counts as stalled depends on the kind of worker that started it:
//
//   - A pgflow-wasm worker (function_name "pgflow-wasm") is gone when its liveness lock
//     (package liveness) has been missing for LivenessGrace, in two looks of this sweeper, or
//     when its heartbeat is stale. A live worker whose connection broke retakes its lock
//     within a second or two; a killed one never does. Such workers stop every handler at its
//     step timeout, so a task started longer ago than its timeout plus a margin has no live
//     handler either, whoever holds it.
//   - Any other worker (pgflow's TypeScript worker) may run a handler for as long as it likes
//     and heartbeats only between batches, so its tasks are judged by its heartbeat alone,
//     with a long threshold of their own (ForeignStaleAfter; 0 leaves them alone). On pgflow
//     0.13.2+ where no pg_cron runs pgflow's own requeue job (plain PostgreSQL with
//     pgflow-wasm's inert stand-in), the sweep also applies upstream's rule to them: started
//     longer ago than the step's timeout plus 30 s. That is how a stalled task of an
//     `external: true` step comes back there.
//
// The sweeper never counts itself among the dead (Self). Each stalled task is requeued in a
// transaction of its own that first locks the task's run (the order pgflow's functions and
// the completer take locks in) and re-checks that the same attempt still holds it (package
// taskwrite): a sweep never deadlocks with a completion writer, never touches a task that
// moved on, and two sweepers at once only repeat a read.
package recovery

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
)

// Config sets when a task counts as stalled.
type Config struct {
	Flows []string // only these flows' tasks are swept (other workers may serve other flows)
	// WorkerStaleAfter is how old a pgflow-wasm worker's last heartbeat may be before its
	// tasks are recovered, whatever its liveness lock says.
	WorkerStaleAfter time.Duration
	// LivenessGrace is how long a pgflow-wasm worker's liveness lock must stay missing, seen
	// by two sweeps, before the worker counts as gone. Default 3 s.
	LivenessGrace time.Duration
	// StartedMargin is added to the step timeout: a pgflow-wasm task started longer ago than
	// that is recovered.
	StartedMargin time.Duration
	// ForeignStaleAfter is how old the heartbeat of a worker of another kind may be before its
	// tasks are recovered (for a task whose worker row is gone: how long ago it started).
	// 0 never recovers them.
	ForeignStaleAfter time.Duration
	// PermanentlyStalled: the database has pgflow 0.13.2+'s requeue_stalled_tasks and
	// step_tasks' permanently_stalled_at and requeued_count: tasks upstream gave up on stay
	// out of the sweep, requeues are counted where upstream counts them, and where no pg_cron
	// runs upstream's job the sweep applies its rule to other workers' tasks.
	PermanentlyStalled bool
	// QueueNames: step_tasks.queue_name names a task's queue (pgflow 0.17+).
	QueueNames bool
	// AttemptHistory keeps each recovered attempt in pgflow_wasm.task_attempts.
	AttemptHistory bool
	// Self lists the sweeping worker's own ids: alive by definition, so a heartbeat that went
	// stale while the database was away does not make it requeue its own running tasks. When
	// none of their liveness locks shows in pg_locks (a transaction-mode pooler between
	// worker and server), locks prove nothing here and only heartbeats count.
	Self []string
	// Holding says whether the sweeping worker still holds a task: runs it, or keeps its
	// outcome until the database takes it. Such a task is never recovered by this sweeper,
	// however long ago it started: during a database outage of a minute the outcome of a
	// task started just before waits longer than its timeout plus the margin, and failing
	// the task would spend an attempt over the outage. nil holds nothing.
	Holding func(runID, stepSlug string, taskIndex int) bool
}

// Recovered is one task the sweep handed back.
type Recovered struct {
	FlowSlug  string
	RunID     string
	StepSlug  string
	TaskIndex int
	Attempt   int    // the attempt that stalled
	Reason    string // why it was taken back
	Status    string // "queued" (will run again) or "failed" (past the requeue bound, attempts used up)
	Attempts  int
	// Requeued: put back without fail_task, its message visible now (taskwrite.RequeueOne);
	// false for a task failed past the requeue bound.
	Requeued bool
}

// Sweeper sweeps again and again, remembering since when it has seen each pgflow-wasm
// worker without its liveness lock. Create with NewSweeper; not for concurrent use.
type Sweeper struct {
	pool         *pgxpool.Pool
	cfg          Config
	now          func() time.Time
	missingSince map[string]time.Time
	readers      map[string]int // own worker id -> live readers of its queue (Readers)
	// upstreamRuns caches whether pg_cron runs pgflow's requeue job here, looked at once
	// a minute (upstreamAt).
	upstreamRuns bool
	upstreamAt   time.Time
}

// DefaultLivenessGrace is Config.LivenessGrace's default: a worker whose liveness lock has
// been gone this long is dead.
const DefaultLivenessGrace = 3 * time.Second

// NewSweeper returns a Sweeper.
func NewSweeper(pool *pgxpool.Pool, cfg Config) *Sweeper {
	if cfg.LivenessGrace <= 0 {
		cfg.LivenessGrace = DefaultLivenessGrace
	}
	if cfg.Self == nil {
		cfg.Self = []string{}
	}
	return &Sweeper{pool: pool, cfg: cfg, now: time.Now, missingSince: map[string]time.Time{}}
}

// stalledSQL lists stalled tasks of live runs with the reason, reading only: the tasks are
// requeued one by one afterwards. $1 flows, $2 margin seconds, $3 stale-heartbeat seconds,
// $4 the sweeper's own worker ids, $5 pgflow-wasm workers whose lock has been missing for the
// grace, $6 foreign stale seconds (0: off), $7 whether upstream's requeue rule is applied
// here to other workers' tasks (no pg_cron runs it).
var stalledSQL = `
with held as materialized (` + liveness.HeldLocksSQL + `),
task as (
  select st.flow_slug, st.run_id, st.step_slug, st.task_index, st.attempts_count, st.started_at,
         st.last_worker_id, coalesce(s.opt_timeout, f.opt_timeout) as timeout,
         w.worker_id, w.function_name, w.last_heartbeat_at,
         w.function_name = '` + liveness.FunctionName + `' as ours,
         coalesce(st.last_worker_id = any($4::text[]::uuid[]), false) as self,
         exists (select 1 from held where held.objid = ` + liveness.KeySQL("w.worker_id") + `) as locked
  from pgflow.step_tasks st
  join pgflow.runs r on r.run_id = st.run_id and r.status = 'started'
  -- A task of a step that is no longer started (skipped, failed: pgflow 0.14 leaves such
  -- rows started forever) is no one's: fail_task would change nothing.
  join pgflow.step_states ss on ss.run_id = st.run_id and ss.step_slug = st.step_slug and ss.status = 'started'
  join pgflow.steps s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
  join pgflow.flows f on f.flow_slug = st.flow_slug
  left join pgflow.workers w on w.worker_id = st.last_worker_id
  where st.status = 'started' and st.flow_slug = any($1::text[]) {{NOT_PERMANENTLY_STALLED}}
),
judged as (
  select t.*, case
    when t.ours and not t.self and ` + liveness.StaleSQL("t.last_heartbeat_at", "$3::float8") + `
      then 'its worker ' || t.worker_id || ' stopped heartbeating at ' || to_char(t.last_heartbeat_at, 'YYYY-MM-DD HH24:MI:SS TZ')
    when t.ours and not t.self and not t.locked and t.worker_id = any($5::text[]::uuid[])
      then 'its worker ' || t.worker_id || ' is gone (no session has held its liveness lock for a while; last heartbeat at '
           || to_char(t.last_heartbeat_at, 'YYYY-MM-DD HH24:MI:SS TZ') || ')'
    when t.ours and t.started_at < clock_timestamp() - make_interval(secs => t.timeout + $2::float8)
      then 'it was started at ' || to_char(t.started_at, 'YYYY-MM-DD HH24:MI:SS TZ') || ', longer ago than its timeout ('
           || t.timeout || ' s) plus ' || $2::float8 || ' s'
    when not coalesce(t.ours, false) and $6::float8 > 0 and t.worker_id is null
         and t.started_at < clock_timestamp() - make_interval(secs => $6::float8)
      then 'its worker ' || coalesce(t.last_worker_id::text, '(unknown)') || ' is not registered and it was started at '
           || to_char(t.started_at, 'YYYY-MM-DD HH24:MI:SS TZ')
    when not coalesce(t.ours, false) and $6::float8 > 0 and t.worker_id is not null
         and ` + liveness.StaleSQL("t.last_heartbeat_at", "$6::float8") + `
      then 'its worker ' || t.worker_id || ' (' || t.function_name || ') stopped heartbeating at '
           || to_char(t.last_heartbeat_at, 'YYYY-MM-DD HH24:MI:SS TZ')
    when not coalesce(t.ours, false) and $7::bool
         and t.started_at < clock_timestamp() - make_interval(secs => t.timeout + ` + upstreamBuffer + `)
      then 'it was started at ' || to_char(t.started_at, 'YYYY-MM-DD HH24:MI:SS TZ') || ' by worker '
           || coalesce(t.last_worker_id::text, '(unknown)') || coalesce(' (' || t.function_name || ')', '')
           || ', longer ago than its timeout (' || t.timeout || ' s) plus ` + upstreamBuffer + ` s, and no pg_cron runs pgflow''s requeue_stalled_tasks here'
  end as reason
  from task t
)
select flow_slug, run_id::text, step_slug, task_index, attempts_count, reason
from judged where reason is not null
order by run_id, step_slug, task_index`

// upstreamBuffer is the seconds past a task's timeout after which pgflow's
// requeue_stalled_tasks takes it back.
const upstreamBuffer = "30"

// cronJobSQL tells whether pg_cron runs pgflow's requeue job in this database: the real
// extension is here (pgflow-wasm's stand-in is a plain schema, not an extension) and the job
// is scheduled, active, for this database.
const cronJobSQL = `select exists (select 1 from cron.job
  where jobname = 'pgflow_requeue_stalled_tasks' and active and database = current_database())`

// upstreamRequeueRuns reports whether pg_cron runs pgflow's requeue job here, looking at
// most once a minute. A look that fails counts as running: another recovery, not ours, is
// then the one to trust.
func (s *Sweeper) upstreamRequeueRuns(ctx context.Context) bool {
	if !s.cfg.PermanentlyStalled {
		return true // no upstream requeue to stand in for
	}
	if !s.upstreamAt.IsZero() && s.now().Sub(s.upstreamAt) < time.Minute {
		return s.upstreamRuns
	}
	var cron bool
	err := s.pool.QueryRow(ctx, `select exists (select 1 from pg_catalog.pg_extension where extname = 'pg_cron')`).Scan(&cron)
	if err == nil && cron {
		err = s.pool.QueryRow(ctx, cronJobSQL).Scan(&cron)
	}
	if err != nil {
		return true // looked at again next sweep
	}
	s.upstreamRuns, s.upstreamAt = cron, s.now()
	return cron
}

// lookSQL is the sweeper's look at the pgflow-wasm workers holding started tasks of its flows:
// whether each holds its liveness lock, and whether the sweeper's own lock shows at all.
// $1 flows, $2 the sweeper's own worker ids.
var lookSQL = `
with held as materialized (` + liveness.HeldLocksSQL + `)
select w.worker_id::text,
       exists (select 1 from held where held.objid = ` + liveness.KeySQL("w.worker_id") + `),
       cardinality($2::text[]) = 0
         or exists (select 1 from held join unnest($2::text[]::uuid[]) u on held.objid = ` + liveness.KeySQL("u") + `)
from pgflow.workers w
where w.function_name = '` + liveness.FunctionName + `'
  and w.worker_id in (select st.last_worker_id from pgflow.step_tasks st
                      where st.status = 'started' and st.flow_slug = any($1::text[]))`

// Started is a task the database holds as started by one of the sweeper's own ids for more
// than a couple of seconds. The worker compares them with the tasks it runs: one it does not
// know was started by a fetch whose reply was lost (host/orphans.go).
type Started struct {
	WorkerID  string
	RunID     string
	StepSlug  string
	TaskIndex int
	Attempt   int
}

// ownStartedSQL lists tasks started by the sweeper's own ids ($1) at least 2 s ago: younger
// ones may belong to a fetch whose reply is being read.
const ownStartedSQL = `
select st.last_worker_id::text, st.run_id::text, st.step_slug, st.task_index, st.attempts_count
from pgflow.step_tasks st
join pgflow.runs r on r.run_id = st.run_id and r.status = 'started'
join pgflow.step_states ss on ss.run_id = st.run_id and ss.step_slug = st.step_slug and ss.status = 'started'
where st.status = 'started' and st.last_worker_id = any($1::text[]::uuid[]) and st.started_at < now() - interval '2 seconds'`

// readersSQL counts, for each of the sweeper's own worker rows ($1), the pgflow-wasm workers
// reading the same queue whose liveness lock is held right now, itself included.
var readersSQL = `
with held as materialized (` + liveness.HeldLocksSQL + `)
select me.worker_id::text,
       (select count(*)::int from pgflow.workers p
        where p.queue_name = me.queue_name and p.function_name = '` + liveness.FunctionName + `'
          and exists (select 1 from held where held.objid = ` + liveness.KeySQL("p.worker_id") + `))
from pgflow.workers me
where me.worker_id = any($1::text[]::uuid[])`

// Readers returns, per own worker id (Config.Self), how many live pgflow-wasm workers read
// that worker row's queue, itself included, as the last sweep counted them. An id missing
// from the map was not counted: its count is unknown, and 1 is the safe reading.
func (s *Sweeper) Readers() map[string]int { return s.readers }

// Suspects reports whether a sweep saw a pgflow-wasm worker without its liveness lock less
// than LivenessGrace ago: the sweeper should look again once the grace has passed, not a
// whole interval later. A worker missing longer is judged already (its tasks recovered, or
// left alone for a reason a second look does not change: pgflow 0.14 leaves the tasks of a
// skipped step started forever), and does not call for an early look.
func (s *Sweeper) Suspects() bool {
	now := s.now()
	for _, since := range s.missingSince {
		if now.Sub(since) < s.cfg.LivenessGrace {
			return true
		}
	}
	return false
}

// Sweep recovers stalled tasks once and returns them. See SweepOwn for the worker's own
// started tasks, read in the same round trip.
func (s *Sweeper) Sweep(ctx context.Context) ([]Recovered, error) {
	got, _, err := s.SweepOwn(ctx)
	return got, err
}

// SweepOwn is Sweep, and also returns the tasks held as started by the sweeper's own ids
// (Started), read in the same round trip and transaction.
func (s *Sweeper) SweepOwn(ctx context.Context) ([]Recovered, []Started, error) {
	cfg := s.cfg
	var gone []string
	now := s.now()
	for id, since := range s.missingSince {
		if now.Sub(since) >= cfg.LivenessGrace {
			gone = append(gone, id)
		}
	}
	if gone == nil {
		gone = []string{}
	}
	var candidates []Recovered
	type look struct {
		id             string
		locked, selfOK bool
	}
	var looks []look
	b := &pgx.Batch{}
	stalled := strings.Replace(stalledSQL, "{{NOT_PERMANENTLY_STALLED}}", "", 1)
	if cfg.PermanentlyStalled {
		stalled = strings.Replace(stalledSQL, "{{NOT_PERMANENTLY_STALLED}}", "and st.permanently_stalled_at is null", 1)
	}
	standIn := !s.upstreamRequeueRuns(ctx)
	b.Queue(stalled, cfg.Flows, cfg.StartedMargin.Seconds(), cfg.WorkerStaleAfter.Seconds(), cfg.Self, gone,
		cfg.ForeignStaleAfter.Seconds(), standIn).Query(func(rows pgx.Rows) error {
		var err error
		candidates, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Recovered, error) {
			var r Recovered
			err := row.Scan(&r.FlowSlug, &r.RunID, &r.StepSlug, &r.TaskIndex, &r.Attempt, &r.Reason)
			return r, err
		})
		return err
	})
	b.Queue(lookSQL, cfg.Flows, cfg.Self).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var l look
			if err := rows.Scan(&l.id, &l.locked, &l.selfOK); err != nil {
				return err
			}
			looks = append(looks, l)
		}
		return rows.Err()
	})
	var own []Started
	if len(cfg.Self) > 0 {
		b.Queue(ownStartedSQL, cfg.Self).Query(func(rows pgx.Rows) error {
			var err error
			own, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Started, error) {
				var t Started
				err := row.Scan(&t.WorkerID, &t.RunID, &t.StepSlug, &t.TaskIndex, &t.Attempt)
				return t, err
			})
			return err
		})
	}
	readers := map[string]int{}
	if len(cfg.Self) > 0 {
		b.Queue(readersSQL, cfg.Self).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				var n int
				if err := rows.Scan(&id, &n); err != nil {
					return err
				}
				if n >= 1 { // 0: its own lock does not show (a pooler between): unknown
					readers[id] = n
				}
			}
			return rows.Err()
		})
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, err
	}
	s.readers = readers
	// What this look saw feeds the next sweep: a lock missing now, and still missing a grace
	// later, is a dead worker.
	seen := map[string]bool{}
	for _, l := range looks {
		if !l.selfOK {
			clear(s.missingSince) // locks do not show from here: heartbeats only
			seen = nil
			break
		}
		seen[l.id] = true
		if l.locked {
			delete(s.missingSince, l.id)
		} else if _, ok := s.missingSince[l.id]; !ok {
			s.missingSince[l.id] = now
		}
	}
	for id := range s.missingSince {
		if !seen[id] {
			delete(s.missingSince, id)
		}
	}

	var out []Recovered
	for _, r := range candidates {
		if cfg.Holding != nil && cfg.Holding(r.RunID, r.StepSlug, r.TaskIndex) {
			continue
		}
		r.Reason = fmt.Sprintf("Task stalled: %s; requeued by pgflow-wasm recovery", r.Reason)
		call := taskwrite.Call{RunID: r.RunID, StepSlug: r.StepSlug, TaskIndex: r.TaskIndex, Attempt: r.Attempt, Arg: r.Reason}
		res, err := taskwrite.RequeueOne(ctx, s.pool, call, taskwrite.RequeueOptions{Options: taskwrite.Options{AttemptHistory: cfg.AttemptHistory},
			Counted: cfg.PermanentlyStalled, QueueNames: cfg.QueueNames})
		if err != nil {
			return out, own, fmt.Errorf("requeueing %s %s[%d]: %w", r.RunID, r.StepSlug, r.TaskIndex, err)
		}
		if res.Stale {
			continue // completed, failed or restarted since the candidates were read
		}
		r.Status, r.Attempts, r.Requeued = res.Status, res.Attempts, res.Requeued
		if !res.Requeued && res.ErrorMessage != "" {
			r.Reason = res.ErrorMessage
		}
		out = append(out, r)
	}
	return out, own, nil
}
