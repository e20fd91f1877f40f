// Package completer writes task outcomes to pgflow: complete_task for successes and
// fail_task for failures, many tasks per transaction.
//
// pgflow's own clients call complete_task once per task, each in its own transaction, and the
// commit (an fsync) dominates. The completer instead group-commits: each of its writers takes
// every outcome that arrived while its previous write was in flight and writes them all in one
// round trip and one transaction, completions in a single statement ordered by run so that
// concurrent writers and workers lock runs in the same order. Several writers run at once
// because complete_task is heavy: one transaction at a time keeps one database core busy. When a batch fails for a reason other than a lost
// connection, each outcome is retried alone, so one bad task never blocks the others. When the
// database is unreachable, outcomes are kept and retried with backoff; if the worker dies
// first, the tasks stay `started` and the stalled-task sweep requeues them.
package completer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
)

// Outcome is what a handler produced for one task: Output on success, or Error.
type Outcome struct {
	Task   fetched.Task
	Output []byte // valid JSON; used when Failed is false
	Failed bool
	Error  string // the fail_task message when Failed
	// Awaited marks a completion that steps served here wait for: its batch is written in a
	// transaction that Config.Claim may start those steps in.
	Awaited bool
}

// Written reports how pgflow took an outcome.
type Written struct {
	Outcome
	// Stale is true when the task was no longer started by this attempt (recovery requeued
	// it, or the write was retried after it had already landed): nothing was changed.
	// StaleReason says which, from the task's row as it is now.
	Stale       bool
	StaleReason string
	// Status is the task's status after the call: "completed"; "queued" (a failure that
	// will be retried); "failed"; or, for a completion, empty when pgflow returned no row
	// because the output broke a dependent map step's array contract (the run failed).
	Status string
	// Attempts is the task's attempts_count after the call.
	Attempts int
	// ErrorMessage is the task's error_message after the call (pgflow 0.14's
	// [TYPE_VIOLATION] message for an output a dependent map step cannot take).
	ErrorMessage string
	// StepStatus and RunStatus are read after a call that left the task "failed": with
	// pgflow 0.14's when_exhausted a failed task may skip its step and leave the run going.
	StepStatus, RunStatus string
	// RunEnded is set on the one outcome of a batch whose write ended its run (completed or
	// failed): each run's end is reported once.
	RunEnded *taskwrite.RunEnd
	// SuccessorsClaimed: Config.Claim started, in the same transaction, every ready task of
	// the steps served here that wait for this completion.
	SuccessorsClaimed bool
	// WriteBegan is when the transaction that wrote the outcome was sent, Committed when its
	// commit came back (the worker's task trace; zero when not written by the completer).
	WriteBegan, Committed time.Time
	// Err is set when the outcome could not be written at all (e.g. shutting down while the
	// database is unreachable); the task then stays started until recovery requeues it.
	Err error
}

// Config configures a Completer.
type Config struct {
	MaxBatch int // outcomes per transaction [DefaultMaxBatch]
	Writers  int // transactions in flight at once [DefaultWriters]
	// OnWritten is called after each commit with what was written, from a writer's
	// goroutine (so possibly from several at once). The worker uses it for metrics, logs and
	// to poll again at once.
	OnWritten func([]Written)
	Log       *slog.Logger
	// OnError is told every error a write met (the worker counts them by class and SQLSTATE).
	OnError func(error)
	// StopTimeout is how long Stop keeps writing what is pending [10s]: a finished handler's
	// work is worth keeping a little longer than a running one's.
	StopTimeout time.Duration
	// AttemptHistory keeps each failure in pgflow_wasm.task_attempts (taskwrite.Options).
	AttemptHistory bool
	// Claim, when set, is called before a batch of completions with an awaited one is sent,
	// on the connection that sends it, to join the successor tasks those completions make
	// ready to their transaction (the worker's claim.go): it may queue statements into b,
	// which runs begin and the completions first, and which the completer ends with the
	// commit. It returns nil where it queued nothing.
	Claim func(conn *pgxpool.Conn, b *pgx.Batch, batch []Outcome) Claim
}

// Claim is a start of successor tasks joined to the transaction of a batch of completions
// (Config.Claim). The completer sends the batch with the commit, then calls Done exactly
// once.
type Claim interface {
	// Err, after a batch that failed, is the failure of one of the claim's own statements:
	// the transaction is then rolled back, the batch written without a claim, and claims stop
	// until the worker restarts (or, for pgflow changed under the worker, go on once it is
	// prepared). After a batch that committed, it is a refusal of the claim's own (it
	// started nothing; the completions stand).
	Err() error
	// Done is told whether the commit landed, before OnWritten, with what was written (nil
	// when it did not): it may mark the outcomes whose successors it started.
	Done(committed bool, written []Written)
}

// Completer batches outcomes. Create with New, start with Start, stop with Stop.
type Completer struct {
	service.State
	pool *pgxpool.Pool
	cfg  Config

	mu        sync.Mutex
	pending   []Outcome
	awaited   int            // pending outcomes marked Awaited
	inflight  int            // outcomes taken by writers and not written yet
	unwritten map[string]int // outcomes marked Awaited, pending or in flight, by flow
	lost      []Outcome      // outcomes writers gave up on when aborted

	refusedSince, refusedSaid time.Time // the outage of writes going on, and when it was last logged
	claimBroken               atomic.Bool

	wakeFirst chan struct{} // rings the first writer: there is something to write
	wakeMore  chan struct{} // rings another writer: there is a backlog worth a second transaction
	stopped   chan struct{} // closed by Stop: writers leave once nothing is pending
	abort     chan struct{} // closed when Stop gives up on an unreachable database
	writers   sync.WaitGroup
}

// The defaults of Config's zero values.
const (
	// DefaultMaxBatch: outcomes written per transaction.
	DefaultMaxBatch = 100
	// DefaultWriters: complete_task is heavy, and one transaction at a time keeps one
	// database core busy; two keep it busy while the other commits.
	DefaultWriters     = 2
	DefaultStopTimeout = 10 * time.Second
)

// New returns a Completer writing through pool.
func New(pool *pgxpool.Pool, cfg Config) *Completer {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Writers <= 0 {
		cfg.Writers = DefaultWriters
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.OnWritten == nil {
		cfg.OnWritten = func([]Written) {}
	}
	return &Completer{pool: pool, cfg: cfg, wakeFirst: make(chan struct{}, 1), wakeMore: make(chan struct{}, 1),
		stopped: make(chan struct{}), abort: make(chan struct{})}
}

// KeepAttemptHistory makes failure writes keep each attempt in pgflow_wasm.task_attempts.
// Call it before Start.
func (c *Completer) KeepAttemptHistory() { c.cfg.AttemptHistory = true }

// parallelBacklog is how many outcomes must wait before a writer other than the first starts
// a transaction of its own. Below it, outcomes that arrive while the first writer commits
// wait for its next transaction: fewer commits, and at low load (a chain of steps) no extra
// fsync in a run's path; above it (a backlog of runs), two transactions use two cores.
const parallelBacklog = 16

// Add queues an outcome; it never blocks.
func (c *Completer) Add(o Outcome) { c.AddReleasing(o, nil) }

// AddReleasing queues an outcome as Add does, and runs release (if set) in between: after
// an awaited outcome counts in Awaited, before any writer can take it. The worker frees the
// ended handler's slot there. Counted first, the slot is one a read leaves free; freed
// before a writer can claim, the claim finds it free. Freed after Add, a second writer that
// took an awaited outcome at once sometimes claimed before the slot was
// free and left the successor to a read (47 of 48 in the worker's test).
func (c *Completer) AddReleasing(o Outcome, release func()) {
	if o.Awaited {
		c.mu.Lock()
		if c.unwritten == nil {
			c.unwritten = map[string]int{}
		}
		c.unwritten[o.Task.FlowSlug]++
		c.mu.Unlock()
	}
	if release != nil {
		release()
	}
	c.mu.Lock()
	c.pending = append(c.pending, o)
	if o.Awaited {
		c.awaited++
	}
	n, urgent := len(c.pending), c.urgent()
	c.mu.Unlock()
	c.ring(n, urgent)
}

// urgent tells whether an awaited outcome waits, which a second writer takes at once rather
// than wait for the first writer's next transaction as other outcomes do below
// parallelBacklog: a chain's step waits for it (docs/RATIONALE.md "Awaited completions do
// not queue"); c.mu is held.
func (c *Completer) urgent() bool {
	return c.awaited > 0
}

// Awaited is the number of outcomes marked Awaited not yet written, in all and of one flow:
// each may start a successor in its writer's transaction (Config.Claim), which needs a free
// slot then. They count until their write returns, although a claim reserves its slots
// earlier: the writer may wait for a connection before it claims, and a read in that time
// took the slots (3 of 48 successors in the worker's test, counting only untaken ones).
func (c *Completer) Awaited(flow string) (all, ofFlow int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.unwritten {
		all += n
	}
	return all, c.unwritten[flow]
}

// Pending is the number of outcomes not yet written.
func (c *Completer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) + c.inflight
}

// Start runs the writers until Stop (the service contract: package service).
func (c *Completer) Start(context.Context) error {
	// Writes get their own context, cancelled only by abort: a write in flight must finish
	// while the worker drains, or a handler's finished work would be thrown away.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.abort
		cancel()
	}()
	for i := range c.cfg.Writers {
		c.writers.Add(1)
		go func() {
			defer c.writers.Done()
			c.writer(ctx, i)
		}()
	}
	c.SetStarted()
	return nil
}

// Stop writes what is pending, retrying for up to Config.StopTimeout, then returns. Outcomes
// still unwritten are reported through OnWritten with Err set: their tasks stay started in
// pgflow, and the stalled-task sweep of any worker requeues them.
func (c *Completer) Stop() {
	defer c.SetStopped()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StopTimeout)
	defer cancel()
	close(c.stopped)
	done := make(chan struct{})
	go func() { c.writers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	close(c.abort)
	<-done
	c.mu.Lock()
	left := append(c.lost, c.pending...)
	c.lost, c.pending, c.awaited, c.unwritten = nil, nil, 0, nil
	c.mu.Unlock()
	if len(left) > 0 {
		lost := make([]Written, len(left))
		for i, o := range left {
			lost[i] = Written{Outcome: o, Err: fmt.Errorf("not written before shutdown: the task stays started and recovery will requeue it")}
		}
		c.cfg.OnWritten(lost)
	}
}

// ring wakes the writers that n pending outcomes call for (urgent: c.urgent()).
func (c *Completer) ring(n int, urgent bool) {
	if n == 0 {
		return
	}
	select {
	case c.wakeFirst <- struct{}{}:
	default:
	}
	if n >= parallelBacklog || urgent {
		select {
		case c.wakeMore <- struct{}{}:
		default:
		}
	}
}

// take moves up to MaxBatch pending outcomes to the caller when at least least are pending
// (or one is urgent), and wakes other writers for what is left.
func (c *Completer) take(least int) []Outcome {
	c.mu.Lock()
	if len(c.pending) < least && !c.urgent() {
		c.mu.Unlock()
		return nil
	}
	n := min(len(c.pending), c.cfg.MaxBatch)
	batch := append([]Outcome(nil), c.pending[:n]...)
	c.pending = c.pending[n:]
	for _, o := range batch {
		if o.Awaited {
			c.awaited--
		}
	}
	c.inflight += n
	left, urgent := len(c.pending), c.urgent()
	c.mu.Unlock()
	c.ring(left, urgent)
	return batch
}

// writer writes batches until the completer stops (nothing pending) or aborts. Writer 0
// writes whatever is pending; the others only a backlog (parallelBacklog).
func (c *Completer) writer(ctx context.Context, i int) {
	retry := kit.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	wake, least := c.wakeFirst, 1
	if i > 0 {
		wake, least = c.wakeMore, parallelBacklog
	}
	var batch []Outcome
	for {
		if len(batch) == 0 {
			if batch = c.take(least); len(batch) == 0 {
				select {
				case <-wake:
				case <-c.stopped:
					if i > 0 || c.Pending() == 0 {
						return // the first writer drains what is left
					}
					// Outcomes are pending or in another writer's hands: look again shortly.
					select {
					case <-wake:
					case <-time.After(10 * time.Millisecond):
					case <-c.abort:
						return
					}
				case <-c.abort:
					return
				}
				continue
			}
		}
		written, left, err := c.write(ctx, batch)
		c.mu.Lock()
		c.inflight -= len(batch) - len(left)
		c.settleAwaited(batch, left)
		c.mu.Unlock()
		batch = left
		if len(written) > 0 {
			c.cfg.OnWritten(written)
		}
		if err == nil {
			retry.Reset()
			c.writesAgain()
			continue
		}
		wait := retry.Next()
		c.refused(err, len(left))
		select {
		case <-time.After(wait):
		case <-c.abort:
			c.mu.Lock()
			c.inflight -= len(batch)
			c.settleAwaited(batch, nil)
			c.lost = append(c.lost, batch...)
			c.mu.Unlock()
			return
		}
	}
}

// settleAwaited stops counting the awaited outcomes of batch that are not in left (written,
// or given up); left is what the writer keeps of batch. c.mu is held.
func (c *Completer) settleAwaited(batch, left []Outcome) {
	for _, o := range batch {
		if o.Awaited {
			c.unwritten[o.Task.FlowSlug]--
		}
	}
	for _, o := range left {
		if o.Awaited {
			c.unwritten[o.Task.FlowSlug]++
		}
	}
}

// refused reports a write the database refused: the first refusal of an outage with what the
// database said, then once a minute while it lasts; the outcomes are kept.
func (c *Completer) refused(err error, tasks int) {
	if c.cfg.OnError != nil {
		c.cfg.OnError(err)
	}
	c.mu.Lock()
	now := time.Now()
	first := c.refusedSince.IsZero()
	if first {
		c.refusedSince = now
	}
	say := first || now.Sub(c.refusedSaid) >= time.Minute
	if say {
		c.refusedSaid = now
	}
	since := c.refusedSince
	pending := len(c.pending) + c.inflight
	c.mu.Unlock()
	if !say {
		return
	}
	msg := "the database refuses to write task outcomes; they are kept and written when it takes them (no task is failed over it)"
	if !first {
		msg = "the database still refuses to write task outcomes; they are kept"
	}
	c.cfg.Log.Warn(msg, "why", dberr.Describe(err), "error", err, "class", dberr.Classify(err).String(),
		"tasks_waiting", pending, "since", since.Format(time.RFC3339), "batch", tasks)
}

// writesAgain ends an outage: the database took a write.
func (c *Completer) writesAgain() {
	c.mu.Lock()
	since := c.refusedSince
	c.refusedSince, c.refusedSaid = time.Time{}, time.Time{}
	c.mu.Unlock()
	if !since.IsZero() {
		c.cfg.Log.Info("the database writes task outcomes again", "refused_for", time.Since(since).Round(time.Millisecond))
	}
}

// write writes one batch and returns what was written and what is left to retry:
// completions in one transaction, then failures in another, each taking its runs' locks in
// run order (one transaction doing both would take them in two passes, and two writers
// could then wait on each other).
func (c *Completer) write(ctx context.Context, batch []Outcome) (written []Written, left []Outcome, err error) {
	slices.SortFunc(batch, func(a, b Outcome) int { return compareTasks(a.Task, b.Task) })
	var completions, failures []Outcome
	for _, o := range batch {
		if o.Failed {
			failures = append(failures, o)
		} else {
			completions = append(completions, o)
		}
	}
	for i, group := range [][]Outcome{completions, failures} {
		if len(group) == 0 {
			continue
		}
		w, l, err := c.writeGroup(ctx, group)
		written = append(written, w...)
		if err != nil {
			if i == 0 {
				l = append(l, failures...)
			}
			return written, l, err
		}
	}
	return written, nil, nil
}

// writeGroup writes outcomes of one kind in one transaction. After a transient error the
// rest is retried later (an outcome is never written twice: the statements only act on a
// task still started by the same attempt). Any other error falls back to one transaction per
// outcome, so one bad task never blocks the others.
//
// Only pgflow's verdict on an outcome (dberr.ClassVerdict: an output jsonb cannot store, a
// failure message it cannot keep) changes what is written: the task then fails with the
// reason. Every other error keeps the outcome for a later retry, however long the database
// refuses (a full disk, no connections left, a failover): the task is never failed and no
// attempt is spent over the database's state (docs/RATIONALE.md, "Database errors").
func (c *Completer) writeGroup(ctx context.Context, batch []Outcome) (written []Written, left []Outcome, err error) {
	written, err = c.writeBatch(ctx, batch)
	if err == nil {
		return written, nil, nil
	}
	if !dberr.Verdict(err) || ctx.Err() != nil {
		return nil, batch, err
	}
	c.cfg.Log.Warn("pgflow refused a batch; writing each task alone to find which", "tasks", len(batch), "error", err)
	for i, o := range batch {
		w, err := c.writeOne(ctx, o)
		if dberr.Verdict(err) {
			fo := o
			if o.Failed {
				// The message itself (a NUL byte, invalid UTF-8): keep what can be stored.
				fo.Error = storableText(o.Error)
			} else {
				// The output (e.g. a \u0000 escape, which jsonb cannot store): fail the task
				// with the reason rather than leave its run hanging.
				c.cfg.Log.Error("complete_task refused the output; failing the task", "run_id", o.Task.RunID,
					"step", o.Task.StepSlug, "task_index", o.Task.TaskIndex, "error", err)
				fo.Failed, fo.Error = true, "pgflow could not store the handler's output: "+err.Error()
			}
			w, err = c.writeOne(ctx, fo)
		}
		if err != nil {
			return written, batch[i:], err // kept: written when the database takes it
		}
		written = append(written, w)
	}
	return written, nil, nil
}

// storableText is s as text PostgreSQL stores: no NUL bytes, valid UTF-8.
func storableText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\\0"), "\uFFFD")
}

// writeBatch writes outcomes of one kind (all completions or all failures) in one round trip
// and one transaction, through taskwrite's guarded calls: an outcome whose task is no longer
// started by its attempt is reported stale and changes nothing.
func (c *Completer) writeBatch(ctx context.Context, batch []Outcome) ([]Written, error) {
	calls := make([]taskwrite.Call, len(batch))
	for i, o := range batch {
		t := o.Task
		calls[i] = taskwrite.Call{RunID: t.RunID, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Attempt: t.Attempt, Arg: string(o.Output),
			WorkerID: t.WorkerID}
		if o.Failed {
			calls[i].Arg = o.Error
		}
	}
	kind := taskwrite.Complete
	if batch[0].Failed {
		kind = taskwrite.Fail
	}
	results := make([]taskwrite.Result, len(batch))
	var ends []taskwrite.RunEnd
	opts := taskwrite.Options{AttemptHistory: c.cfg.AttemptHistory, RunEnds: &ends}
	var written []Written
	var began, committed time.Time
	if kind == taskwrite.Complete && c.cfg.Claim != nil && !c.claimBroken.Load() && slices.ContainsFunc(batch, func(o Outcome) bool { return o.Awaited }) {
		b := &pgx.Batch{}
		b.Queue(`begin`)
		taskwrite.Queue(b, kind, calls, results, opts)
		var err error
		if written, began, committed, err = c.writeClaiming(ctx, b, batch, results); err != nil {
			return nil, err
		}
	}
	if written == nil {
		ends = ends[:0] // a claiming write rolled back ended nothing
		b := &pgx.Batch{}
		taskwrite.Queue(b, kind, calls, results, opts)
		// One round trip and, since a batch ends with a single Sync, one implicit transaction.
		began = time.Now()
		if err := c.pool.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		committed = time.Now()
		written = made(batch, results)
	}
	for i := range written {
		written[i].WriteBegan, written[i].Committed = began, committed
	}
	for _, e := range ends {
		if i := slices.IndexFunc(written, func(w Written) bool { return w.Task.RunID == e.RunID }); i >= 0 {
			written[i].RunEnded = &e
		}
	}
	c.explainStale(ctx, written)
	c.readFailedStates(ctx, written)
	return written, nil
}

// made is what the results of a batch's statements say of its outcomes.
func made(batch []Outcome, results []taskwrite.Result) []Written {
	written := make([]Written, len(batch))
	for i, r := range results {
		written[i] = Written{Outcome: batch[i], Stale: r.Stale, Status: r.Status, Attempts: r.Attempts, ErrorMessage: r.ErrorMessage}
	}
	return written
}

// writeClaiming writes a batch of completions (b: begin, then their statements) in an explicit
// transaction that Config.Claim joins, in one round trip: the completions, the claim's read
// of their successors' messages and their start, and the commit. Where the claim has nothing
// to do, the completions commit alone. It returns no outcomes, and no error, where the claim
// failed: the transaction is rolled back and the caller writes the batch the plain way.
func (c *Completer) writeClaiming(ctx context.Context, b *pgx.Batch, batch []Outcome, results []taskwrite.Result) (written []Written, began, committed time.Time, err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, began, committed, err
	}
	// Released inside a transaction (a failed rollback), the connection is closed by the pool.
	defer conn.Release()
	claim := c.cfg.Claim(conn, b, batch)
	if claim == nil { // no free slot, or draining: the batch is the plain write with begin
		b.Queue(`commit`)
		began = time.Now()
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			kit.Rollback(conn)
			return nil, began, committed, err
		}
		return made(batch, results), began, time.Now(), nil
	}
	// failed ends a transaction that did not commit: a failure of the claim's own stops
	// claims and leaves the batch to the plain way; any other is the batch's.
	failed := func(err error) error {
		kit.Rollback(conn)
		claim.Done(false, nil)
		cerr := claim.Err()
		if cerr == nil || dberr.Transient(err) || ctx.Err() != nil {
			return err // the connection or the completions, not the claim: written later
		}
		c.claimRefused(cerr) // this batch is written the plain way
		return nil
	}
	b.Queue(`commit`)
	began = time.Now()
	err = conn.SendBatch(ctx, b).Close() // begin, the completions, the claim's read and start, commit
	committed = time.Now()
	if err != nil {
		// A lost reply to the commit may hide a landed one: the started tasks are then the
		// orphan sweep's, and the rewrite of the completions is found stale.
		return nil, began, committed, failed(err)
	}
	written = made(batch, results)
	claim.Done(true, written)
	if cerr := claim.Err(); cerr != nil {
		// The claim refused in the database and started nothing; the completions committed.
		c.claimRefused(cerr)
	}
	return written, began, committed, nil
}

// claimRefused handles a failure of a claim's own: pgflow changed under the worker, whose
// watch prepares for the new one, and claims go on afterwards; anything else stops claims
// until the worker restarts.
func (c *Completer) claimRefused(cerr error) {
	if dberr.SchemaChanged(cerr) {
		if c.cfg.OnError != nil {
			c.cfg.OnError(cerr)
		}
		return
	}
	c.claimBroken.Store(true)
	c.cfg.Log.Warn("starting successor tasks in their predecessors' transaction failed; completions are written without it from now on",
		"error", cerr)
}

// readFailedStates reads the step's and the run's status for tasks that ended failed, so the
// log can say whether the run failed or (pgflow 0.14's when_exhausted: skip) goes on. Rare,
// and only for the log: a failed read leaves them empty.
func (c *Completer) readFailedStates(ctx context.Context, written []Written) {
	for i := range written {
		w := &written[i]
		if w.Stale || w.Status != "failed" {
			continue
		}
		_ = c.pool.QueryRow(ctx, `select ss.status, r.status from pgflow.step_states ss join pgflow.runs r on r.run_id = ss.run_id
			where ss.run_id = $1::text::uuid and ss.step_slug = $2`, w.Task.RunID, w.Task.StepSlug).Scan(&w.StepStatus, &w.RunStatus)
	}
}

func (c *Completer) writeOne(ctx context.Context, o Outcome) (Written, error) {
	w, err := c.writeBatch(ctx, []Outcome{o})
	if err != nil {
		return Written{Outcome: o}, err
	}
	return w[0], nil
}

// explainStale says why each stale outcome matched no task, from the task's row as it is
// now. It is only for the log line: a failure to read is reported as such, never retried.
func (c *Completer) explainStale(ctx context.Context, written []Written) {
	for i := range written {
		w := &written[i]
		if !w.Stale {
			continue
		}
		t := w.Task
		var status, lastWorker, errMsg string
		var attempts int
		err := c.pool.QueryRow(ctx, `select status, attempts_count, coalesce(last_worker_id::text, ''), coalesce(error_message, '')
			from pgflow.step_tasks where run_id = $1::text::uuid and step_slug = $2 and task_index = $3`,
			t.RunID, t.StepSlug, t.TaskIndex).Scan(&status, &attempts, &lastWorker, &errMsg)
		if err != nil {
			w.StaleReason = "the task could not be read to say why: " + err.Error()
			continue
		}
		w.StaleReason = staleReason(w.Outcome, status, attempts, lastWorker, errMsg)
	}
}

// staleReason tells what happened to a task that an outcome no longer matched.
func staleReason(o Outcome, status string, attempts int, lastWorker, errMsg string) string {
	t := o.Task
	mine := attempts == t.Attempt && lastWorker == t.WorkerID
	switch {
	case mine && !o.Failed && status == "completed":
		return "already written: an earlier write of this outcome committed before its connection was lost"
	case mine && o.Failed && errMsg == o.Error && (status == "queued" || status == "failed"):
		return "already written: an earlier write of this failure committed before its connection was lost"
	case status == "cancelled" || status == "skipped":
		return "pgflow " + status + " the task while it ran (its run failed, or its step was skipped): this outcome is dropped, as pgflow drops it"
	case attempts > t.Attempt:
		return fmt.Sprintf("the task was handed back and started again (attempt %d, status %s): this attempt's outcome is dropped", attempts, status)
	case status == "queued" || status == "failed":
		if errMsg != "" {
			return fmt.Sprintf("the task is %s after another writer failed it (%q): this outcome is dropped", status, errMsg)
		}
		return "the task is " + status + ": this outcome is dropped"
	}
	return fmt.Sprintf("the task is %s (attempt %d, worker %s): this outcome is dropped", status, attempts, lastWorker)
}

// compareTasks orders by run, then step, then index: the lock order of every batch.
func compareTasks(a, b fetched.Task) int {
	if c := strings.Compare(a.RunID, b.RunID); c != 0 {
		return c
	}
	if c := strings.Compare(a.StepSlug, b.StepSlug); c != 0 {
		return c
	}
	return a.TaskIndex - b.TaskIndex
}
