package poller

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/plans"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// A claim starts, in the transaction that completes their predecessors, the successor tasks
// those completions made ready: their messages were sent by that transaction, so no other
// session can see them before it commits. It is a fetch folded into the completion's two
// round trips: the read rides with the completions (QueueClaim), the start with the commit
// (QueueStart), and no statement waits for a round trip of its own while the runs are locked.

// ClaimRead is a claim's read of successor messages, queued behind the completions.
type ClaimRead struct {
	f           *Fetcher
	startSchema string
	plan        readPlan
	start       *started
	// left: a visible message the read was asked for was left behind (more than qty).
	left bool
	err  error // the read's or the start's own failure
}

// QueueClaim queues into b, after the statements that complete tasks of the given runs, the
// read of up to qty visible messages in this fetcher's queue whose tasks of the given steps
// of those runs are queued. It reads them as a fetch does (vt, read_ct). It returns nil and
// queues nothing where the queue is read through pgmq.read (a layout it does not know) or
// nothing is asked; conn is the connection b will be sent on.
func (f *Fetcher) QueueClaim(conn *pgxpool.Conn, b *pgx.Batch, runIDs, steps []string, qty int) *ClaimRead {
	if qty <= 0 || len(runIDs) == 0 || len(steps) == 0 || !f.readsTable.Load() {
		return nil
	}
	proto := f.proto.Load()
	c := &ClaimRead{f: f, startSchema: "pgflow", plan: readPlan{proto: proto}}
	if !proto.queueNames {
		c.startSchema = plans.TwinMade(conn.Conn()) // making one would end the caller's transaction
	}
	// The completions' write took the upgrade lock: the newest migration holds for the claim.
	f.queueWitness(b, &c.err)
	table := schema.QueueTable(f.queue)
	// One candidate more than asked for is locked (a message of this transaction's own,
	// which nobody else can see yet): whether it exists tells whether the read left one.
	b.Queue(`
		with candidates as (
		  select m.msg_id from `+table+` m
		  where m.msg_id in (
		      select st.message_id from pgflow.step_tasks st
		      where st.flow_slug = $1 and st.run_id = any($2::text[]::uuid[]) and st.step_slug = any($3::text[])
		        and st.status = 'queued' `+sameQueue(proto, "$6")+`)
		    and m.vt <= clock_timestamp()
		  order by m.msg_id limit $5 + 1 for update skip locked),
		picked as (select msg_id from candidates order by msg_id limit $5)
		update `+table+` m set vt = clock_timestamp() + make_interval(secs => $4), read_ct = m.read_ct + 1
		from picked where m.msg_id = picked.msg_id
		returning m.msg_id, m.message, `+waitedSQL+`, (select count(*) from candidates) > $5`, f.flow, runIDs, steps, f.readVT, qty, f.queue).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id int64
			var body []byte
			var waited float64
			var left bool
			if err := rows.Scan(&id, &body, &waited, &left); err != nil {
				c.err = fmt.Errorf("claiming successors in queue %s: %w", f.queue, err)
				return c.err
			}
			c.left = c.left || left
			if err := f.add(&c.plan, id, body, waited); err != nil {
				c.err = err
				return err
			}
		}
		if err := rows.Err(); err != nil {
			c.err = fmt.Errorf("claiming successors in queue %s: %w", f.queue, err)
		}
		return c.err
	})
	return c
}

// QueueStart queues into b, once the read's batch ran, the start of the tasks of the messages
// it read; it queues nothing where it read none. The caller queues the commit after it.
func (c *ClaimRead) QueueStart(b *pgx.Batch) {
	if len(c.plan.ids) == 0 {
		return
	}
	c.start = c.f.queueStart(b, c.startSchema, c.plan)
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

// Tasks are the tasks the claim started for this worker, once the start's batch ran; sent is
// when that batch was sent.
func (c *ClaimRead) Tasks(sent time.Time) []fetched.Task {
	if c.start == nil {
		return nil
	}
	return c.start.mine(sent)
}
