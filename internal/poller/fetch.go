// Package poller gets work from pgflow: it reads a batch of a flow's queue messages,
// starts their tasks and extends their visibility (the two-phase fetch), and decides when to
// look again (polling with decorrelated-jitter backoff, or LISTEN/NOTIFY wake-ups).
package poller

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/plans"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Fetcher runs the two-phase fetch for one queue of a flow: the flow's own queue, or on
// pgflow 0.17+ a step's queue of a flow with per-step queues.
type Fetcher struct {
	pool  *pgxpool.Pool
	flow  string
	queue string // the pgmq queue read
	step  string // start_tasks' step selector (a per-step queue); "" for a flow queue
	// proto is what the database's start_tasks takes and returns; a worker that finds pgflow
	// upgraded under it swaps it (SetProtocol) while fetches go on.
	proto atomic.Pointer[claimProtocol]
	// witness is the newest migration `db install` had applied when the worker prepared for
	// its pgflow (schema.NewestMigration); "" checks none (SetWitness).
	witness  atomic.Pointer[string]
	workerID string
	// visibility returns the seconds a started task's message stays hidden: the step's
	// timeout plus a margin, so the message does not reappear while the handler runs.
	visibility func(step string) int
	readVT     int
	mapStep    func(step string) bool
	inputs     *runInputCache
	// readSQL reads messages: $1 queue, $2 visibility seconds, $3 how many (queueRead); ""
	// until the queue's layout has been looked at.
	readSQL string
	// readsTable: readSQL reads the queue's table by visibility, which Claim's statement
	// needs too (set by the fetch loop, read by the completer's writers).
	readsTable atomic.Bool
	// unstarted are messages a fetch read but could not start (the database went away):
	// shown again by the next fetch. Only the fetch loop of this flow touches it.
	unstarted []int64
	log       *slog.Logger
}

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	Flow string
	// Queue is the pgmq queue to read: the flow's slug (pgflow's queue of a flow), or on
	// pgflow 0.17+ the queue_name of a step of a flow with per-step queues ("" = Flow).
	Queue string
	// Step is the step whose per-step queue Queue is; "" for a flow queue.
	Step string
	// QueueNames: pgflow 0.17+'s start_tasks(flow, ids, worker, queue[, step]); before, it
	// takes no queue (and a flow has one queue, named after it).
	QueueNames bool
	// SetsVisibility: pgflow 0.15.1+'s start_tasks gives each message its step's timeout
	// + 2 s itself; before, set_vt_batch here does what its own call never did.
	SetsVisibility bool
	WorkerID       string
	// Visibility gives, per step slug, the visibility in seconds set after start_tasks.
	Visibility func(step string) int
	// ReadVT is the visibility pgmq.read gives messages (default 30 s). Set it to the
	// visibility of the flow's longest step: then only messages of shorter steps need a
	// set_vt_batch after start_tasks, and a flow whose steps share one timeout needs none.
	ReadVT int
	// FlowInput says start_tasks returns flow_input (pgflow 0.12+), which then also builds
	// handler inputs without "run". Whatever it says, the fetcher puts "run" back into a
	// single step's input that lacks it, so a handler gets ABI v1's input on every pgflow,
	// including one upgraded under the worker (see withRun).
	FlowInput bool
	// MapStep tells map steps (whose input is their element, on every pgflow) from single ones.
	MapStep func(step string) bool
	// Log is told, at debug level, when a connection cannot have a twin of start_tasks
	// (package plans) and why.
	Log *slog.Logger
}

// NewFetcher returns a Fetcher for one flow.
func NewFetcher(pool *pgxpool.Pool, cfg FetcherConfig) *Fetcher {
	if cfg.ReadVT <= 0 {
		cfg.ReadVT = 30
	}
	if cfg.MapStep == nil {
		cfg.MapStep = func(string) bool { return false }
	}
	if cfg.Queue == "" {
		cfg.Queue = cfg.Flow
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	f := &Fetcher{log: cfg.Log, pool: pool, flow: cfg.Flow, queue: cfg.Queue, step: cfg.Step,
		workerID: cfg.WorkerID, visibility: cfg.Visibility,
		readVT: cfg.ReadVT, mapStep: cfg.MapStep, inputs: newRunInputCache(runInputCacheBytes)}
	f.SetProtocol(cfg.QueueNames, cfg.SetsVisibility, cfg.FlowInput)
	return f
}

// claimProtocol is what the database's start_tasks takes and does.
type claimProtocol struct {
	queueNames     bool
	setsVisibility bool
	flowInput      bool
}

// SetWitness gives the newest migration `db install` had applied when the worker read the
// protocol (SetProtocol): a fetch or claim that finds another refuses to start tasks, with an
// error wrapping dberr.ErrSchemaChanged, so no task is started on a pgflow the worker has not
// prepared for. Checked inside the transaction after it takes the upgrade lock, in the round
// trip of the read. "" checks nothing (pgflow installed by other tools).
func (f *Fetcher) SetWitness(newest string) { f.witness.Store(&newest) }

// queueWitness queues into b the check of the newest migration, where there is one to
// check: a newer one than SetWitness gave is the error returned to b's reader, and kept in
// *failed where failed is not nil.
func (f *Fetcher) queueWitness(b *pgx.Batch, failed *error) {
	w := f.witness.Load()
	if w == nil || *w == "" {
		return
	}
	want := *w
	b.Queue(schema.NewestMigrationSQL).QueryRow(func(row pgx.Row) error {
		var got string
		if err := row.Scan(&got); err != nil {
			return err
		}
		if got != want {
			err := f.witnessError(want, got)
			if failed != nil {
				*failed = err
			}
			return err
		}
		return nil
	})
}

// witnessError is the error of a fetch or claim that found another newest migration.
func (f *Fetcher) witnessError(want, got string) error {
	return fmt.Errorf("pgflow migration %s was applied after the worker prepared for %s: %w", got, want, dberr.ErrSchemaChanged)
}

// SetProtocol changes what the fetcher's next fetches and claims expect of start_tasks
// (FetcherConfig's QueueNames, SetsVisibility and FlowInput): for a worker that found pgflow
// upgraded under it. A fetch or claim already begun keeps what it began with.
func (f *Fetcher) SetProtocol(queueNames, setsVisibility, flowInput bool) {
	f.proto.Store(&claimProtocol{queueNames: queueNames, setsVisibility: setsVisibility, flowInput: flowInput})
}

// Queue is the pgmq queue the fetcher reads.
func (f *Fetcher) Queue() string { return f.queue }

// fetchTimeout bounds one fetch, which its caller's context does not interrupt (Fetch).
const fetchTimeout = 30 * time.Second

// asyncCommit opens a fetch's one transaction (the read, then start_tasks): its commit does
// not wait for the WAL flush. A database crash that loses it loses the read and the start
// together: the messages are visible again and their tasks queued, and the attempt's outcome
// is refused by the guarded write. An outcome commits synchronously, and the WAL is a
// sequence, so a durable outcome makes its start durable. A chain's step starts one flush
// sooner (docs/RATIONALE.md "A fetch is one asynchronous transaction").
const asyncCommit = `select set_config('synchronous_commit', 'off', true)`

// pgmqRead is pgmq's own read: the first visible messages by msg_id.
const pgmqRead = "select msg_id, message, " + waitedSQL + " from pgmq.read($1, $2, $3) m"

// queueRead returns the statement a fetch reads a queue with. pgmq.read walks the queue by
// msg_id past every message that is hidden (being run) or deleted and not yet vacuumed, so
// each read costs as much as all the tasks in flight on the queue: with 16 workers of 32
// slots each, 2,500 buffers per read. Where the queue table has pgmq's index on vt (pgmq
// 1.x and our layer both create it), the messages are read by visibility instead: the scan
// starts at the longest-visible message and never meets a hidden or archived one (those
// have a vt in the future). It changes what pgmq.read changes (vt, read_ct) and nothing else;
// any other layout gets pgmq.read (docs/RATIONALE.md "A queue is read by visibility").
// An error of the look itself is returned: the caller reads with pgmq.read this once and
// looks again next time, rather than keeping the slow read for the fetcher's life.
func queueRead(ctx context.Context, pool *pgxpool.Pool, queue string) (string, error) {
	var ok bool
	err := pool.QueryRow(ctx, `
		select exists (
		  select 1 from pg_catalog.pg_index i
		  join pg_catalog.pg_class c on c.oid = i.indrelid
		  join pg_catalog.pg_namespace n on n.oid = c.relnamespace and n.nspname = 'pgmq'
		  join pg_catalog.pg_attribute a on a.attrelid = c.oid and a.attnum = i.indkey[0]
		  where c.relname = $1 and c.relkind = 'r' and a.attname = 'vt' and i.indpred is null)`, schema.QueueTableName(queue)).Scan(&ok)
	if err != nil {
		return pgmqRead, err
	}
	if !ok {
		return pgmqRead, nil
	}
	table := schema.QueueTable(queue)
	// now() bounds the index scan (pgmq's clock_timestamp() cannot): it is this
	// transaction's start, a moment earlier. $1 is unused but kept, so both statements take
	// the same arguments.
	return `with picked as (
	  select msg_id from ` + table + ` where vt <= now() and $1::text is not null
	  order by vt limit $3 for update skip locked)
	update ` + table + ` m set vt = clock_timestamp() + make_interval(secs => $2), read_ct = m.read_ct + 1
	from picked where m.msg_id = picked.msg_id
	returning m.msg_id, m.message, ` + waitedSQL, nil
}

// waitedSQL is, in a read returning message m, the seconds m waited since its enqueue.
const waitedSQL = `extract(epoch from clock_timestamp() - m.enqueued_at)::float8`

// message is the body pgflow puts in every queue message.
type message struct {
	RunID    string `json:"run_id"`
	StepSlug string `json:"step_slug"`
}

// Fetch reads at most qty messages and starts their tasks. It makes two round trips in one
// transaction: the read, then start_tasks, set_vt_batch (when some step's visibility differs
// from the read's), the attempt counts, any run inputs not yet cached and the commit,
// pipelined (so a lost connection leaves every message visible and every task queued).
// Messages whose task is not queued (already started elsewhere, or its run failed) are
// skipped silently by start_tasks, so fewer tasks than messages may come back.
//
// Once begun, a fetch is not cut short by ctx: cancelled between start_tasks and reading its
// result, it would leave tasks started that nobody runs. It checks ctx only before it begins
// and otherwise ends within fetchTimeout; the caller runs (or drains) what it returns.
func (f *Fetcher) Fetch(ctx context.Context, qty int) ([]fetched.Task, error) {
	if qty <= 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	if err := f.showUnstarted(ctx); err != nil {
		return nil, fmt.Errorf("showing messages of a failed start again (%s): %w", f.queue, err)
	}
	readSQL := f.readSQL
	if readSQL == "" {
		var err error
		if readSQL, err = queueRead(ctx, f.pool, f.queue); err == nil {
			f.readSQL = readSQL
			f.readsTable.Store(readSQL != pgmqRead)
		}
	}
	type read struct {
		id     int64
		body   []byte
		waited float64
	}
	var got []read
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading queue %s: %w", f.queue, err)
	}
	// A connection released inside a transaction (a failed rollback) is closed by the pool.
	defer conn.Release()
	proto := f.proto.Load()
	startSchema := "pgflow"
	if !proto.queueNames {
		var why error
		if startSchema, why = plans.TwinSchema(ctx, conn.Conn()); why != nil {
			f.log.Debug("fetches on this connection call pgflow.start_tasks itself, not a twin that keeps its plan", "why", why)
		}
	}
	b := &pgx.Batch{}
	b.Queue(`begin`).Exec(func(pgconn.CommandTag) error { return nil })
	b.Queue(asyncCommit).Exec(func(pgconn.CommandTag) error { return nil })
	b.Queue(schema.UpgradeLockShared).Exec(func(pgconn.CommandTag) error { return nil })
	f.queueWitness(b, nil)
	b.Queue(readSQL, f.queue, f.readVT, qty).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r read
			if err := rows.Scan(&r.id, &r.body, &r.waited); err != nil {
				return err
			}
			got = append(got, r)
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		kit.Rollback(conn)
		return nil, fmt.Errorf("reading queue %s: %w", f.queue, err)
	}
	p := readPlan{proto: proto}
	for _, r := range got {
		if err := f.add(&p, r.id, r.body, r.waited); err != nil {
			// Committed, the read keeps the message hidden for readVT seconds: rolled back,
			// every fetch would read it again at once.
			_, _ = conn.Exec(ctx, `commit`)
			return nil, err
		}
	}
	ids := p.ids
	if len(ids) == 0 {
		if _, err := conn.Exec(ctx, `commit`); err != nil {
			return nil, fmt.Errorf("reading queue %s: %w", f.queue, err)
		}
		return nil, nil
	}
	tasks, err := f.start(ctx, conn, startSchema, p)
	if err != nil {
		kit.Rollback(conn)
		// Rolled back, the read is undone too. Only a commit whose reply was lost may have
		// hidden these messages for readVT seconds, with no notification to say when they
		// show again: once the database answers, show those whose task is still queued.
		f.unstarted = append(f.unstarted, ids...)
	}
	return tasks, err
}

// readPlan is what start needs of the messages a read (or a claim) took: their ids, those
// whose step's visibility differs from the read's with that visibility, and the runs whose
// input is not cached.
type readPlan struct {
	proto      *claimProtocol // what the fetch or claim that read them expects of start_tasks
	ids, vtIDs []int64
	offsets    []int32
	missing    []string
	seenRun    map[string]bool
	waited     map[int64]float64 // seconds each message waited in the queue, by id
}

// add puts one read message into p.
func (f *Fetcher) add(p *readPlan, id int64, body []byte, waited float64) error {
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return fmt.Errorf("queue %s message %d is not a pgflow task message: %w", f.queue, id, err)
	}
	p.ids = append(p.ids, id)
	if p.waited == nil {
		p.waited = map[int64]float64{}
	}
	p.waited[id] = waited
	if vt := f.visibility(m.StepSlug); vt != f.readVT {
		p.vtIDs = append(p.vtIDs, id)
		p.offsets = append(p.offsets, int32(vt))
	}
	if p.seenRun == nil {
		p.seenRun = map[string]bool{}
	}
	if !p.seenRun[m.RunID] && f.inputs.get(m.RunID) == nil {
		p.missing = append(p.missing, m.RunID)
	}
	p.seenRun[m.RunID] = true
	return nil
}

// showUnstarted makes the messages of failed starts visible again when their tasks are still
// queued (a start that did commit before its reply was lost left them started: those stay
// hidden, and the worker hands their tasks back, see host/orphans.go).
func (f *Fetcher) showUnstarted(ctx context.Context) error {
	if len(f.unstarted) == 0 {
		return nil
	}
	_, err := f.pool.Exec(ctx, `
		with todo as materialized (
		  select st.message_id from pgflow.step_tasks st
		  where st.flow_slug = $1 and st.message_id = any($2::bigint[]) and st.status = 'queued' `+f.sameQueue("$3")+`)
		select count(*) from todo, lateral pgmq.set_vt($3, todo.message_id, 0) v`, f.flow, f.unstarted, f.queue)
	if err == nil {
		f.unstarted = nil
	}
	return err
}

// start claims the read messages' tasks through startSchema's start_tasks (queueStart) and
// commits the transaction with them, in one round trip.
func (f *Fetcher) start(ctx context.Context, conn *pgxpool.Conn, startSchema string, p readPlan) ([]fetched.Task, error) {
	b := &pgx.Batch{}
	// The read, sent before, kept its custom plan; start_tasks and the lookups reuse theirs.
	// (A claim's start needs no switch of its own: the completions' write made it.)
	plans.QueueGeneric(b)
	s := f.queueStart(b, startSchema, p, claimedIDs{})
	// The commit, with the read's: both are kept or both are lost.
	b.Queue(`commit`).Exec(func(pgconn.CommandTag) error { return nil })
	sent := time.Now()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("start_tasks(%s, queue %s): %w", f.flow, f.queue, err)
	}
	return s.mine(sent), nil
}

// started is a start of read messages' tasks queued into a batch: the batch's replies fill
// it as they come.
type started struct {
	f         *Fetcher
	tasks     []fetched.Task
	attempts  map[int64]int
	runInputs map[string][]byte // read by this start (the cache may drop them meanwhile)
	noRun     []bool            // by task: its input has no "run" member
	waited    map[int64]float64 // the read's seconds in the queue, by message id
	err       error             // start_tasks' own failure, when it is the batch's first
}

// claimedIDs, for a claim's start, names the transaction's setting that holds the ids its
// read took (queued in the same batch, before anyone knows them), with the steps whose
// messages need a visibility other than the read's; zero for a fetch, whose ids are known.
type claimedIDs struct {
	setting string
	steps   map[string]int
}

// queueStart queues into b the start of p's tasks through startSchema's start_tasks: pgflow's,
// or its twin in pg_temp (package plans), then the visibility of shorter steps' messages,
// the attempt counts and the inputs of runs not cached. It leaves the commit to the caller.
// For a claim, the ids are read from claimed.setting rather than p.
func (f *Fetcher) queueStart(b *pgx.Batch, startSchema string, p readPlan, claimed claimedIDs) *started {
	proto := p.proto
	s := &started{f: f, attempts: map[int64]int{}, runInputs: map[string][]byte{}, waited: p.waited}
	vtIDs, offsets, missingRuns := p.vtIDs, p.offsets, p.missing
	var ids any = p.ids
	idsSQL := "$2::bigint[]"
	if claimed.setting != "" {
		ids, idsSQL = claimed.setting, "current_setting($2)::bigint[]"
	}
	flowInput := "null::jsonb"
	if proto.flowInput {
		flowInput = "flow_input"
	}
	claim, args := startSchema+`.start_tasks($1, `+idsSQL+`, $3::text::uuid)`, []any{f.flow, ids, f.workerID}
	switch {
	case proto.queueNames && f.step != "":
		claim, args = `pgflow.start_tasks($1, `+idsSQL+`, $3::text::uuid, $4, $5)`, append(args, f.queue, f.step)
	case proto.queueNames:
		claim, args = `pgflow.start_tasks($1, `+idsSQL+`, $3::text::uuid, $4)`, append(args, f.queue)
	}
	// hasRun: whether the input carries "run" is read off the input itself, not the protocol
	// the fetcher expects, so a fetch that met a pgflow upgraded under it (0.12 dropped "run")
	// still hands ABI v1's input to the handler (withRun).
	b.Queue(`select run_id::text, step_slug, task_index, msg_id, input, `+flowInput+`,
	            jsonb_typeof(input) = 'object' and input ? 'run' from `+claim, args...).Query(func(rows pgx.Rows) error {
		now := time.Now()
		for rows.Next() {
			t := fetched.Task{FlowSlug: f.flow, StartedAt: now}
			var input, runInput []byte
			var hasRun bool
			if err := rows.Scan(&t.RunID, &t.StepSlug, &t.TaskIndex, &t.MsgID, &input, &runInput, &hasRun); err != nil {
				return err
			}
			t.Input = input
			s.noRun = append(s.noRun, !hasRun)
			if runInput != nil {
				s.runInputs[t.RunID] = runInput
			}
			s.tasks = append(s.tasks, t)
		}
		s.err = rows.Err()
		return s.err
	})
	// pgflow 0.8's start_tasks means to set each message's visibility to its step's timeout
	// + 2 s, but its set_vt_batch CTE is never evaluated. pgmq.read already gave every message
	// the longest step's visibility; messages of shorter steps get theirs here.
	switch {
	case claimed.setting != "" && len(claimed.steps) > 0:
		// The claimed messages of those steps and their visibilities, decided in a query that
		// calls nothing, then one call.
		steps, vts := make([]string, 0, len(claimed.steps)), make([]int32, 0, len(claimed.steps))
		for step, vt := range claimed.steps {
			steps, vts = append(steps, step), append(vts, int32(vt))
		}
		b.Queue(`select count(*) from (
		    select coalesce(array_agg(m.msg_id order by m.msg_id), '{}') as ids, coalesce(array_agg(v.vt order by m.msg_id), '{}') as vts
		    from `+schema.QueueTable(f.queue)+` m join unnest($2::text[], $3::int[]) as v(step, vt) on v.step = m.message->>'step_slug'
		    where m.msg_id = any(current_setting($4)::bigint[])) s,
		  lateral pgflow.set_vt_batch($1, s.ids, s.vts)`, f.flow, steps, vts, claimed.setting).
			Exec(func(pgconn.CommandTag) error { return nil })
	case len(vtIDs) > 0 && !proto.setsVisibility:
		b.Queue(`select count(*) from pgflow.set_vt_batch($1, $2::bigint[], $3::int[])`, f.flow, vtIDs, offsets).
			Exec(func(pgconn.CommandTag) error { return nil })
	}
	b.Queue(`select st.message_id, st.attempts_count from pgflow.step_tasks st
	          where st.flow_slug = $1 and st.message_id = any(`+idsSQL+`) and st.status = 'started' and st.last_worker_id = $3::text::uuid `+
		sameQueue(proto, "$4"), f.flow, ids, f.workerID, f.queue).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id int64
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			s.attempts[id] = n
		}
		return rows.Err()
	})
	if len(missingRuns) > 0 {
		b.Queue(`select run_id::text, input from pgflow.runs where run_id = any($1::text[]::uuid[])`, missingRuns).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var id string
					var input []byte
					if err := rows.Scan(&id, &input); err != nil {
						return err
					}
					s.runInputs[id] = input // the cache may refuse an input larger than its budget
					f.inputs.put(id, input)
				}
				return rows.Err()
			})
	}
	return s
}

// mine is the tasks the start took for this worker, once its batch ran; sent is when the
// batch was sent. start_tasks returns a task to every caller racing on its message, though
// only one caller's update applies (its CTE reads the statement snapshot): the attempt lookup,
// which matches last_worker_id, says which.
func (s *started) mine(sent time.Time) []fetched.Task {
	f := s.f
	mine := s.tasks[:0]
	for i, t := range s.tasks {
		n, ok := s.attempts[t.MsgID]
		if !ok {
			continue
		}
		t.Attempt = n
		t.WorkerID = f.workerID
		t.ClaimSent = sent
		t.QueueWait = time.Duration(s.waited[t.MsgID] * float64(time.Second))
		t.FlowInput = s.runInputs[t.RunID]
		if t.FlowInput == nil {
			t.FlowInput = f.inputs.get(t.RunID)
		}
		if s.noRun[i] && !f.mapStep(t.StepSlug) {
			t.Input = withRun(t.Input, t.FlowInput)
		}
		mine = append(mine, t)
	}
	slices.SortFunc(mine, func(a, b fetched.Task) int { return cmp.Compare(a.MsgID, b.MsgID) })
	return mine
}

// sameQueue is the condition that a step_tasks row's message is in this fetcher's queue,
// given the parameter holding the queue name: on pgflow 0.17+ message ids are unique per
// queue only (a flow with per-step queues repeats them), before there is one queue a flow.
func (f *Fetcher) sameQueue(param string) string { return sameQueue(f.proto.Load(), param) }

func sameQueue(proto *claimProtocol, param string) string {
	if !proto.queueNames {
		return "and " + param + "::text is not null" // keeps the parameter in use
	}
	return "and st.queue_name = " + param
}

// withRun rebuilds ABI v1's input of a single step from what pgflow 0.12+ sends: there a root
// step gets {} (its flow input comes in a column of its own) and a dependent step gets only
// its dependencies' outputs, {"dep": output, ...} (a skipped dependency has no key). "run"
// is a reserved step slug, so it never collides with a dependency.
func withRun(input, runInput json.RawMessage) json.RawMessage {
	if runInput == nil {
		runInput = json.RawMessage("null")
	}
	body := bytes.TrimSpace(input)
	if len(body) < 2 || body[0] != '{' {
		return input // not an object: nothing pgflow sends to a single step
	}
	rest := bytes.TrimSpace(body[1:]) // the members and the closing brace
	out := make([]byte, 0, len(runInput)+len(body)+10)
	out = append(out, `{"run": `...)
	out = append(out, runInput...)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ", "...)
	}
	return append(out, rest...)
}
