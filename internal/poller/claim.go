package poller

import (
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/plans"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// A claim starts, in the transaction that completes their predecessors, the successor tasks
// those completions made ready: their messages were sent by that transaction, so no other
// session can see them before it commits. It is a fetch folded into the completion's one
// round trip: the read and the start are queued behind the completions, and the commit
// behind them, so no statement waits for a round trip of its own while the runs are locked.
// The read hands the ids it took to the statements of the start through a setting of the
// transaction (claimedSetting): they are queued before anyone knows them.

// ClaimRead is a claim's read of successor messages and the start of their tasks, queued
// behind the completions.
type ClaimRead struct {
	f     *Fetcher
	plan  readPlan
	start *started
	// left: a visible message the read was asked for was left behind (more than qty).
	left bool
	err  error // the read's own failure
}

// claimedSetting is the name of the transaction's setting that carries the ids a claim's
// read took to its start: the read's position in the batch keeps two claims of one batch
// (two flows) apart.
func claimedSetting(b *pgx.Batch) string {
	return "pgflow_wasm.claimed_" + strconv.Itoa(b.Len())
}

// QueueClaim queues into b, after the statements that complete tasks of the given runs, the
// read of up to qty visible messages in this fetcher's queue whose tasks of the given steps
// of those runs are queued, and the start of their tasks. It reads them as a fetch does (vt,
// read_ct) and starts them as a fetch does; the caller queues the commit after it. It
// returns nil and queues nothing where the queue is read through pgmq.read (a layout it
// does not know) or nothing is asked; conn is the connection b will be sent on.
func (f *Fetcher) QueueClaim(conn *pgxpool.Conn, b *pgx.Batch, runIDs, steps []string, qty int) *ClaimRead {
	if qty <= 0 || len(runIDs) == 0 || len(steps) == 0 || !f.readsTable.Load() {
		return nil
	}
	proto := f.proto.Load()
	startSchema := "pgflow"
	if !proto.queueNames {
		startSchema = plans.TwinMade(conn.Conn()) // making one would end the caller's transaction
	}
	c := &ClaimRead{f: f, plan: readPlan{proto: proto, waited: map[int64]float64{}}}
	table := schema.QueueTable(f.queue)
	setting := claimedSetting(b)
	// The batch commits whatever its reader makes of the replies, so what refuses the claim
	// must be decided in the database: the read takes nothing unless the newest migration is
	// the one the worker prepared for (the completions' write took the upgrade lock, so it
	// holds until the commit), and the start then starts nothing. "" checks none (pgflow
	// installed by other tools, without pgflow_wasm.schema_migrations).
	newest, gate, want := `''::text`, "", ""
	if w := f.witness.Load(); w != nil && *w != "" {
		want = *w
		newest, gate = "(select name from newest)", "and (select name from newest) = $8"
	}
	// One candidate more than asked for is locked (a message of this transaction's own,
	// which nobody else can see yet): whether it exists tells whether the read left one.
	// The aggregate is one row whatever the read took, so the setting is always set: a
	// statement behind it never reads an earlier claim's ids.
	b.Queue(`
		with newest as (`+newestSQL(want)+`),
		candidates as (
		  select m.msg_id from `+table+` m
		  where m.msg_id in (
		      select st.message_id from pgflow.step_tasks st
		      where st.flow_slug = $1 and st.run_id = any($2::text[]::uuid[]) and st.step_slug = any($3::text[])
		        and st.status = 'queued' `+sameQueue(proto, "$6")+`)
		    and m.vt <= clock_timestamp() `+gate+`
		  order by m.msg_id limit $5 + 1 for update skip locked),
		picked as (select msg_id from candidates order by msg_id limit $5),
		taken as (
		  update `+table+` m set vt = clock_timestamp() + make_interval(secs => $4), read_ct = m.read_ct + 1
		  from picked where m.msg_id = picked.msg_id
		  returning m.msg_id, `+waitedSQL+` as waited),
		handed as (
		  select set_config($7, coalesce(array_agg(msg_id order by msg_id), '{}')::text, true) as ids from taken)
		select t.msg_id, t.waited, (select count(*) from candidates) > $5, handed.ids, `+newest+`, $8::text
		from handed left join taken t on true`, f.flow, runIDs, steps, f.readVT, qty, f.queue, setting, want).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id *int64
			var waited *float64
			var left *bool
			var handed, got, want string
			if err := rows.Scan(&id, &waited, &left, &handed, &got, &want); err != nil {
				c.err = fmt.Errorf("claiming successors in queue %s: %w", f.queue, err)
				return c.err
			}
			if got != want {
				// Not returned: the rest of the batch, the completions' commit, is kept.
				c.err = f.witnessError(want, got)
			}
			if id == nil {
				continue // the read took nothing
			}
			c.left = c.left || *left
			c.plan.ids = append(c.plan.ids, *id)
			c.plan.waited[*id] = *waited
		}
		if err := rows.Err(); err != nil {
			c.err = fmt.Errorf("claiming successors in queue %s: %w", f.queue, err)
			return c.err
		}
		return nil
	})
	// The start's lookups are the fetch's, on the ids the read handed over; the inputs of the
	// runs not cached are known before the read: the successors are tasks of these runs.
	p := c.plan
	p.missing = nil
	for _, id := range runIDs {
		if f.inputs.get(id) == nil {
			p.missing = append(p.missing, id)
		}
	}
	c.start = f.queueStart(b, startSchema, p, claimedIDs{setting: setting, steps: f.shorterSteps(proto, steps)})
	return c
}

// newestSQL is the claim read's CTE of the newest migration: read where the worker checks one.
func newestSQL(want string) string {
	if want == "" {
		return `select ''::text as name`
	}
	return `select coalesce(max(name), '') as name from pgflow_wasm.schema_migrations`
}

// shorterSteps are the steps, of those given, whose messages need a visibility other than
// the read's after start_tasks (where start_tasks does not set it itself), with it.
func (f *Fetcher) shorterSteps(proto *claimProtocol, steps []string) map[string]int {
	if proto.setsVisibility {
		return nil
	}
	var m map[string]int
	for _, s := range steps {
		if vt := f.visibility(s); vt != f.readVT {
			if m == nil {
				m = map[string]int{}
			}
			m[s] = vt
		}
	}
	return m
}

// Read is how many messages the read took, and whether it left a visible one it was asked
// for (it was asked for fewer than there are): where it left none, a read of the queue now
// would find none of them.
func (c *ClaimRead) Read() (n int, leftSome bool) { return len(c.plan.ids), c.left }

// Err is the failure of the claim's own read or start, where one of them was the first
// statement of its batch to fail, or the claim's refusal (a migration the worker did not
// prepare for, wrapping dberr.ErrSchemaChanged) in a batch that ran: it then started
// nothing, and the batch's other statements stand. nil where they did not run or succeeded.
func (c *ClaimRead) Err() error {
	if c.err != nil {
		return c.err
	}
	if c.start != nil && c.start.err != nil {
		return fmt.Errorf("start_tasks(%s, queue %s) for claimed successors: %w", c.f.flow, c.f.queue, c.start.err)
	}
	return nil
}

// Tasks are the tasks the claim started for this worker, once its batch ran; sent is when
// that batch was sent.
func (c *ClaimRead) Tasks(sent time.Time) []fetched.Task {
	if c.start == nil {
		return nil
	}
	return c.start.mine(sent)
}
