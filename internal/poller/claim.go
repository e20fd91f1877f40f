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
	// The completions' write took the upgrade lock: the newest migration holds for the claim.
	f.queueWitness(b, &c.err)
	table := schema.QueueTable(f.queue)
	setting := claimedSetting(b)
	// One candidate more than asked for is locked (a message of this transaction's own,
	// which nobody else can see yet): whether it exists tells whether the read left one.
	// The aggregate is one row whatever the read took, so the setting is always set: a
	// statement behind it never reads an earlier claim's ids.
	b.Queue(`
		with candidates as (
		  select m.msg_id from `+table+` m
		  where m.msg_id in (
		      select st.message_id from pgflow.step_tasks st
		      where st.flow_slug = $1 and st.run_id = any($2::text[]::uuid[]) and st.step_slug = any($3::text[])
		        and st.status = 'queued' `+sameQueue(proto, "$6")+`)
		    and m.vt <= clock_timestamp()
		  order by m.msg_id limit $5 + 1 for update skip locked),
		picked as (select msg_id from candidates order by msg_id limit $5),
		taken as (
		  update `+table+` m set vt = clock_timestamp() + make_interval(secs => $4), read_ct = m.read_ct + 1
		  from picked where m.msg_id = picked.msg_id
		  returning m.msg_id, m.message, `+waitedSQL+` as waited),
		handed as (
		  select set_config($7, coalesce(array_agg(msg_id order by msg_id), '{}')::text, true) as ids from taken)
		select t.msg_id, t.message, t.waited, (select count(*) from candidates) > $5, handed.ids
		from handed left join taken t on true`, f.flow, runIDs, steps, f.readVT, qty, f.queue, setting).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id *int64
			var body []byte
			var waited *float64
			var left *bool
			var handed string
			if err := rows.Scan(&id, &body, &waited, &left, &handed); err != nil {
				c.err = fmt.Errorf("claiming successors in queue %s: %w", f.queue, err)
				return c.err
			}
			if id == nil {
				continue // the read took nothing
			}
			c.left = c.left || *left
			if err := f.add(&c.plan, *id, body, *waited); err != nil {
				c.err = err
				return err
			}
		}
		if err := rows.Err(); err != nil {
			c.err = fmt.Errorf("claiming successors in queue %s: %w", f.queue, err)
		}
		return c.err
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
// statement of its batch to fail; nil where they did not run or succeeded.
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
