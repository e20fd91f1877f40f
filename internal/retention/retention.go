// Package retention deletes finished runs once they are old: the run, its step states and
// tasks, pgflow-wasm's own rows about it (every table of schema pgflow_wasm with a run_id)
// and its tasks' archived queue messages. Runs that have not finished are never touched.
// Worker processes' registrations silent as long go too (processes.go).
//
// The work goes in batches of runs, each its own short transaction that locks only the
// runs it deletes (FOR UPDATE SKIP LOCKED), so the workers serving other runs never wait
// on it for long. Batches walk pgflow.runs in run_id order: one pass over the table
// however many batches, and a run another transaction holds is left for the next prune.
package retention

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/schema"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// DefaultBatchSize is how many runs one transaction deletes unless told otherwise.
const DefaultBatchSize = 1000

// Options says which runs go and how; Counts is what went (or would go). Both are the
// public leaf's, which the root package hands to its users.
type (
	Options = pgflowtype.PruneOptions
	Counts  = pgflowtype.Pruned
)

// add sums o into c.
func add(c *Counts, o Counts) {
	c.Runs += o.Runs
	c.StepStates += o.StepStates
	c.StepTasks += o.StepTasks
	c.ArchivedMessages += o.ArchivedMessages
	if c.Own == nil {
		c.Own = map[string]int64{}
	}
	for t, n := range o.Own {
		c.Own[t] += n
	}
}

var ageRE = regexp.MustCompile(`^(?:(\d+)d)?(.*)$`)

// ParseAge reads an age such as 30d, 12h, 90m or 1d12h (days, then anything Go's
// time.ParseDuration reads); it must be positive.
func ParseAge(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not an age: write it as 30d, 12h, 90m or 1d12h", s)
	m := ageRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil || (m[1] == "" && m[2] == "") {
		return 0, bad
	}
	var d time.Duration
	if m[1] != "" {
		days, err := strconv.Atoi(m[1])
		if err != nil || days > 100*365 {
			return 0, bad
		}
		d = time.Duration(days) * 24 * time.Hour
	}
	if m[2] != "" {
		rest, err := time.ParseDuration(m[2])
		if err != nil {
			return 0, bad
		}
		d += rest
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: the age must be more than zero", s)
	}
	return d, nil
}

// tables is where a database keeps what belongs to a run.
type tables struct {
	queueColumn string   // step_tasks' column naming a task's queue: queue_name (0.17+) or flow_slug
	pgflowExtra []string // pgflow's tables with a run_id other than runs, step_states and step_tasks
	own         []string // pgflow-wasm's tables with a run_id
}

// scheduleTicks keeps each flow's latest tick row even when its run goes: the scheduler
// reads the latest tick to know which ticks were missed (internal/schedule). Its run_id
// is cleared instead.
const scheduleTicks = "pgflow_wasm.schedule_ticks"

func discover(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}) (tables, error) {
	var t tables
	proto, err := schema.DetectPgflow(ctx, q)
	if err != nil {
		return t, err
	}
	t.queueColumn = "flow_slug"
	if proto.QueueNames {
		t.queueColumn = "queue_name"
	}
	rows, err := q.Query(ctx, `select c.table_schema, c.table_name from information_schema.columns c
		join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name
		where c.table_schema in ('pgflow', 'pgflow_wasm') and c.column_name = 'run_id' and c.data_type = 'uuid'
		  and t.table_type = 'BASE TABLE'
		  and (c.table_schema, c.table_name) not in (('pgflow', 'runs'), ('pgflow', 'step_states'), ('pgflow', 'step_tasks'))
		order by 1, 2`)
	if err != nil {
		return t, err
	}
	names, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var n [2]string
		err := r.Scan(&n[0], &n[1])
		return n, err
	})
	if err != nil {
		return t, err
	}
	for _, n := range names {
		name := pgx.Identifier{n[0], n[1]}.Sanitize()
		if n[0] == "pgflow" {
			t.pgflowExtra = append(t.pgflowExtra, name)
		} else {
			t.own = append(t.own, name)
		}
	}
	return t, nil
}

// display is a table's name as Counts.Own keys it.
func display(quoted string) string { return strings.ReplaceAll(quoted, `"`, "") }

const finished = `status in ('completed', 'failed') and coalesce(completed_at, failed_at) < $1`

// Prune deletes the runs opts selects, batch by batch, and returns what it deleted. When
// ctx ends it stops between batches: what was deleted stays deleted, the rest is left whole.
func Prune(ctx context.Context, pool *pgxpool.Pool, opts Options) (Counts, error) {
	total := Counts{Own: map[string]int64{}}
	if opts.OlderThan <= 0 {
		return total, errors.New("retention: the age of the runs to prune must be more than zero")
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	t, err := discover(ctx, pool)
	if err != nil {
		return total, err
	}
	var cutoff time.Time
	if err := pool.QueryRow(ctx, `select now() - make_interval(secs => $1)`, opts.OlderThan.Seconds()).Scan(&cutoff); err != nil {
		return total, err
	}
	archives := map[string]bool{} // queue -> its archive table exists
	last := "00000000-0000-0000-0000-000000000000"
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var batch Counts
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			batch = Counts{Own: map[string]int64{}}
			var ids []string
			rows, err := tx.Query(ctx, `select run_id::text as id from pgflow.runs
				where run_id > $2::uuid and `+finished+`
				order by run_id limit $3 for update skip locked`, cutoff, last, opts.BatchSize)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			n = len(ids)
			if n == 0 {
				return nil
			}
			last = ids[n-1]
			return deleteRuns(ctx, tx, t, archives, ids, &batch)
		})
		if err != nil {
			return total, err
		}
		if n == 0 {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pruneProcesses(ctx, tx, cutoff, &total) })
			return total, err
		}
		add(&total, batch)
		total.Batches++
		if opts.Progress != nil {
			opts.Progress(total)
		}
	}
}

// deleteRuns deletes the runs ids (locked by tx) and everything keyed to them.
func deleteRuns(ctx context.Context, tx pgx.Tx, t tables, archives map[string]bool, ids []string, c *Counts) error {
	// The archived messages first, found through their tasks' message ids (the archive's
	// primary key) and checked against the run named in the message.
	rows, err := tx.Query(ctx, `select `+t.queueColumn+`, array_agg(message_id) from pgflow.step_tasks
		where run_id = any($1::uuid[]) and message_id is not null group by 1`, ids)
	if err != nil {
		return err
	}
	type queueMsgs struct {
		queue string
		ids   []int64
	}
	byQueue, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queueMsgs, error) {
		var q queueMsgs
		err := r.Scan(&q.queue, &q.ids)
		return q, err
	})
	if err != nil {
		return err
	}
	for _, q := range byQueue {
		exists, known := archives[q.queue]
		if !known {
			if err := tx.QueryRow(ctx, `select to_regclass($1) is not null`, schema.ArchiveTable(q.queue)).Scan(&exists); err != nil {
				return err
			}
			archives[q.queue] = exists
		}
		if !exists {
			continue
		}
		tag, err := tx.Exec(ctx, `delete from `+schema.ArchiveTable(q.queue)+`
			where msg_id = any($1) and message->>'run_id' = any($2)`, q.ids, ids)
		if err != nil {
			return err
		}
		c.ArchivedMessages += tag.RowsAffected()
	}
	for _, table := range t.own {
		if display(table) == scheduleTicks {
			// Written again without its run rather than updated: a worker login of `db
			// grant-worker` may insert and delete in schema pgflow_wasm, not update.
			if _, err := tx.Exec(ctx, `with latest as (
				  delete from pgflow_wasm.schedule_ticks t
				  where run_id = any($1::uuid[]) and tick = (select max(tick) from pgflow_wasm.schedule_ticks m where m.flow_slug = t.flow_slug)
				  returning t.*)
				insert into pgflow_wasm.schedule_ticks
				select (jsonb_populate_record(null::pgflow_wasm.schedule_ticks, to_jsonb(latest) - 'run_id')).* from latest`, ids); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `delete from `+table+` where run_id = any($1::uuid[])`, ids)
		if err != nil {
			return err
		}
		c.Own[display(table)] += tag.RowsAffected()
	}
	for _, table := range t.pgflowExtra {
		if _, err := tx.Exec(ctx, `delete from `+table+` where run_id = any($1::uuid[])`, ids); err != nil {
			return err
		}
	}
	for _, step := range []struct {
		table string
		n     *int64
	}{{"pgflow.step_tasks", &c.StepTasks}, {"pgflow.step_states", &c.StepStates}, {"pgflow.runs", &c.Runs}} {
		tag, err := tx.Exec(ctx, `delete from `+step.table+` where run_id = any($1::uuid[])`, ids)
		if err != nil {
			return err
		}
		*step.n = tag.RowsAffected()
	}
	return nil
}

// Count says what Prune with the same age would delete now, deleting nothing.
func Count(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration) (Counts, error) {
	c := Counts{Own: map[string]int64{}}
	if olderThan <= 0 {
		return c, errors.New("retention: the age of the runs to prune must be more than zero")
	}
	t, err := discover(ctx, pool)
	if err != nil {
		return c, err
	}
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var cutoff time.Time
		if err := tx.QueryRow(ctx, `select now() - make_interval(secs => $1)`, olderThan.Seconds()).Scan(&cutoff); err != nil {
			return err
		}
		old := `select run_id from pgflow.runs where ` + finished
		if err := tx.QueryRow(ctx, `select (select count(*) from pgflow.runs where `+finished+`),
			  (select count(*) from pgflow.step_states where run_id in (`+old+`)),
			  (select count(*) from pgflow.step_tasks where run_id in (`+old+`))`, cutoff).
			Scan(&c.Runs, &c.StepStates, &c.StepTasks); err != nil {
			return err
		}
		for _, table := range t.own {
			var n int64
			where := `run_id in (` + old + `)`
			if display(table) == scheduleTicks { // the latest tick is kept (deleteRuns)
				where += ` and tick < (select max(tick) from pgflow_wasm.schedule_ticks m where m.flow_slug = t.flow_slug)`
			}
			if err := tx.QueryRow(ctx, `select count(*) from `+table+` t where `+where, cutoff).Scan(&n); err != nil {
				return err
			}
			c.Own[display(table)] = n
		}
		rows, err := tx.Query(ctx, `select distinct `+t.queueColumn+` from pgflow.step_tasks where run_id in (`+old+`) and message_id is not null`, cutoff)
		if err != nil {
			return err
		}
		queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, q := range queues {
			var exists bool
			if err := tx.QueryRow(ctx, `select to_regclass($1) is not null`, schema.ArchiveTable(q)).Scan(&exists); err != nil || !exists {
				if err != nil {
					return err
				}
				continue
			}
			var n int64
			if err := tx.QueryRow(ctx, `select count(*) from `+schema.ArchiveTable(q)+` a
				join pgflow.step_tasks st on st.message_id = a.msg_id and st.run_id::text = a.message->>'run_id'
				where st.`+t.queueColumn+` = $2 and st.run_id in (`+old+`)`, cutoff, q).Scan(&n); err != nil {
				return err
			}
			c.ArchivedMessages += n
		}
		return countProcesses(ctx, tx, cutoff, &c)
	})
	return c, err
}
