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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/poller"
)

// Outcome is what a handler produced for one task: Output on success, or Error.
type Outcome struct {
	Task   poller.Task
	Output []byte // valid JSON; used when Failed is false
	Failed bool
	Error  string // the fail_task message when Failed
}

// Written reports how pgflow took an outcome.
type Written struct {
	Outcome
	// Stale is true when the task was no longer started by this attempt (recovery requeued
	// it, or the write was retried after it had already landed): nothing was changed.
	Stale bool
	// Status is the task's status after the call: "completed"; "queued" (a failure that
	// will be retried); "failed"; or, for a completion, empty when pgflow returned no row
	// because the output broke a dependent map step's array contract (the run failed).
	Status string
	// Attempts is the task's attempts_count after the call.
	Attempts int
	// Err is set when the outcome could not be written at all (e.g. shutting down while the
	// database is unreachable); the task then stays started until recovery requeues it.
	Err error
}

// Config configures a Completer.
type Config struct {
	MaxBatch int // outcomes per transaction (default 100)
	Writers  int // transactions in flight at once (default 2)
	// OnWritten is called after each commit with what was written, from a writer's
	// goroutine (so possibly from several at once). The worker uses it for metrics, logs and
	// to poll again at once.
	OnWritten func([]Written)
	Log       *slog.Logger
}

// Completer batches outcomes. Create with New, start with Start, stop with Stop.
type Completer struct {
	pool *pgxpool.Pool
	cfg  Config

	mu       sync.Mutex
	pending  []Outcome
	inflight int       // outcomes taken by writers and not written yet
	lost     []Outcome // outcomes writers gave up on when aborted

	wakeFirst chan struct{} // rings the first writer: there is something to write
	wakeMore  chan struct{} // rings another writer: there is a backlog worth a second transaction
	stopped   chan struct{} // closed by Stop: writers leave once nothing is pending
	abort     chan struct{} // closed when Stop gives up on an unreachable database
	writers   sync.WaitGroup
}

// New returns a Completer writing through pool.
func New(pool *pgxpool.Pool, cfg Config) *Completer {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 100
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 2
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.OnWritten == nil {
		cfg.OnWritten = func([]Written) {}
	}
	return &Completer{pool: pool, cfg: cfg, wakeFirst: make(chan struct{}, 1), wakeMore: make(chan struct{}, 1),
		stopped: make(chan struct{}), abort: make(chan struct{})}
}

// parallelBacklog is how many outcomes must wait before a writer other than the first starts
// a transaction of its own. Below it, outcomes that arrive while the first writer commits
// wait for its next transaction: fewer commits, and at low load (a chain of steps) no extra
// fsync in a run's path; above it (a backlog of runs), two transactions use two cores.
const parallelBacklog = 16

// Add queues an outcome; it never blocks.
func (c *Completer) Add(o Outcome) {
	c.mu.Lock()
	c.pending = append(c.pending, o)
	n := len(c.pending)
	c.mu.Unlock()
	c.ring(n)
}

// Pending is the number of outcomes not yet written.
func (c *Completer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) + c.inflight
}

// Start runs the writers until Stop.
func (c *Completer) Start() {
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
}

// Stop writes what is pending, retrying until ctx is done, then returns. Outcomes still
// unwritten are reported through OnWritten with Err set: their tasks stay started in
// pgflow, and the stalled-task sweep of any worker requeues them.
func (c *Completer) Stop(ctx context.Context) {
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
	c.lost, c.pending = nil, nil
	c.mu.Unlock()
	if len(left) > 0 {
		lost := make([]Written, len(left))
		for i, o := range left {
			lost[i] = Written{Outcome: o, Err: fmt.Errorf("not written before shutdown: the task stays started and recovery will requeue it")}
		}
		c.cfg.OnWritten(lost)
	}
}

// ring wakes the writers that n pending outcomes call for.
func (c *Completer) ring(n int) {
	if n == 0 {
		return
	}
	select {
	case c.wakeFirst <- struct{}{}:
	default:
	}
	if n >= parallelBacklog {
		select {
		case c.wakeMore <- struct{}{}:
		default:
		}
	}
}

// take moves up to MaxBatch pending outcomes to the caller when at least least are
// pending, and wakes other writers for what is left.
func (c *Completer) take(least int) []Outcome {
	c.mu.Lock()
	if len(c.pending) < least {
		c.mu.Unlock()
		return nil
	}
	n := min(len(c.pending), c.cfg.MaxBatch)
	batch := append([]Outcome(nil), c.pending[:n]...)
	c.pending = c.pending[n:]
	c.inflight += n
	left := len(c.pending)
	c.mu.Unlock()
	c.ring(left)
	return batch
}

// writer writes batches until the completer stops (nothing pending) or aborts. Writer 0
// writes whatever is pending; the others only a backlog (parallelBacklog).
func (c *Completer) writer(ctx context.Context, i int) {
	retry := poller.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
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
		c.mu.Unlock()
		batch = left
		if len(written) > 0 {
			c.cfg.OnWritten(written)
		}
		if err == nil {
			retry.Reset()
			continue
		}
		wait := retry.Next()
		c.cfg.Log.Warn("could not write task outcomes; retrying", "tasks", len(left), "error", err, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-c.abort:
			c.mu.Lock()
			c.inflight -= len(batch)
			c.lost = append(c.lost, batch...)
			c.mu.Unlock()
			return
		}
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

// writeGroup writes outcomes in one transaction. After a transient error the rest is
// retried later (an outcome is never written twice: the statements only act on a task still
// started by the same attempt). Any other error falls back to one transaction per outcome,
// so one bad task never blocks the others.
func (c *Completer) writeGroup(ctx context.Context, batch []Outcome) (written []Written, left []Outcome, err error) {
	written, err = c.writeBatch(ctx, batch)
	if err == nil {
		return written, nil, nil
	}
	if dberr.Transient(err) || ctx.Err() != nil {
		return nil, batch, err
	}
	c.cfg.Log.Warn("batch write failed; writing each task alone", "tasks", len(batch), "error", err)
	for i, o := range batch {
		w, err := c.writeOne(ctx, o)
		if err != nil && !dberr.Transient(err) && !o.Failed {
			// pgflow refused the output (e.g. a \u0000 escape, which jsonb cannot store): fail
			// the task with the reason rather than leave its run hanging.
			c.cfg.Log.Error("complete_task refused the output; failing the task", "run_id", o.Task.RunID,
				"step", o.Task.StepSlug, "task_index", o.Task.TaskIndex, "error", err)
			fo := o
			fo.Failed, fo.Error = true, "pgflow could not store the output: "+err.Error()
			w, err = c.writeOne(ctx, fo)
		}
		if err != nil && (dberr.Transient(err) || ctx.Err() != nil) {
			return written, batch[i:], err
		}
		if err != nil {
			w = Written{Outcome: o, Err: err}
		}
		written = append(written, w)
	}
	return written, nil, nil
}

// The guard (the task is still started, by the same attempt) makes every write safe to
// repeat: a retried batch that had in fact committed, or a late write after recovery
// requeued the task, changes nothing. "matched" tells a stale write from a complete_task that
// returned no row (the output broke a dependent map's array contract).
// Ids travel as text (::text::uuid): pgx cannot encode a Go string as a binary uuid and
// would build an error, then retry as text, for every parameter of every batch.
const completeBatchSQL = `
select t.ord, g.matched, g.status, g.attempts_count
from unnest($1::text[]::uuid[], $2::text[], $3::int[], $4::int[], $5::text[]) with ordinality
       as t(run_id, step_slug, task_index, attempt, output, ord)
left join lateral (
  select true as matched, c.status, c.attempts_count
  from pgflow.step_tasks st
  left join lateral pgflow.complete_task(st.run_id, st.step_slug, st.task_index, t.output::jsonb) c on true
  where st.run_id = t.run_id and st.step_slug = t.step_slug and st.task_index = t.task_index
    and st.status = 'started' and st.attempts_count = t.attempt
) g on true
order by t.ord`

const completeOneSQL = `
select true, c.status, c.attempts_count
from pgflow.step_tasks st
left join lateral pgflow.complete_task(st.run_id, st.step_slug, st.task_index, $5::jsonb) c on true
where st.run_id = $1::text::uuid and st.step_slug = $2 and st.task_index = $3
  and st.status = 'started' and st.attempts_count = $4`

const failOneSQL = `
select true, f.status, f.attempts_count
from pgflow.step_tasks st
cross join lateral pgflow.fail_task(st.run_id, st.step_slug, st.task_index, $5) f
where st.run_id = $1::text::uuid and st.step_slug = $2 and st.task_index = $3
  and st.status = 'started' and st.attempts_count = $4`

func (c *Completer) writeBatch(ctx context.Context, batch []Outcome) ([]Written, error) {
	written := make([]Written, len(batch))
	b := &pgx.Batch{}
	var runs, steps, outputs []string
	var idx, attempts []int32
	var completeAt []int // positions in batch
	for i, o := range batch {
		written[i].Outcome = o
		if o.Failed {
			continue
		}
		runs = append(runs, o.Task.RunID)
		steps = append(steps, o.Task.StepSlug)
		idx = append(idx, int32(o.Task.TaskIndex))
		attempts = append(attempts, int32(o.Task.Attempt))
		outputs = append(outputs, string(o.Output))
		completeAt = append(completeAt, i)
	}
	if len(completeAt) > 0 {
		b.Queue(completeBatchSQL, runs, steps, idx, attempts, outputs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var ord int64
				var matched *bool
				var status *string
				var n *int
				if err := rows.Scan(&ord, &matched, &status, &n); err != nil {
					return err
				}
				setResult(&written[completeAt[ord-1]], matched != nil, status, n)
			}
			return rows.Err()
		})
	}
	for i, o := range batch {
		if !o.Failed {
			continue
		}
		w := &written[i]
		t := o.Task
		b.Queue(failOneSQL, t.RunID, t.StepSlug, t.TaskIndex, t.Attempt, o.Error).Query(func(rows pgx.Rows) error {
			return scanOne(rows, w)
		})
	}
	// One round trip and, since a batch ends with a single Sync, one implicit transaction.
	if err := c.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return written, nil
}

func (c *Completer) writeOne(ctx context.Context, o Outcome) (Written, error) {
	w := Written{Outcome: o}
	t := o.Task
	sql, last := completeOneSQL, string(o.Output)
	if o.Failed {
		sql, last = failOneSQL, o.Error
	}
	rows, err := c.pool.Query(ctx, sql, t.RunID, t.StepSlug, t.TaskIndex, t.Attempt, last)
	if err != nil {
		return w, err
	}
	return w, scanOne(rows, &w)
}

// scanOne reads the single-task form of the guarded statements: no row means stale.
func scanOne(rows pgx.Rows, w *Written) error {
	defer rows.Close()
	matched := false
	var status *string
	var n *int
	if rows.Next() {
		if err := rows.Scan(&matched, &status, &n); err != nil {
			return err
		}
	}
	rows.Close()
	setResult(w, matched, status, n)
	return rows.Err()
}

func setResult(w *Written, matched bool, status *string, attempts *int) {
	w.Stale = !matched
	if status != nil {
		w.Status = *status
	}
	if attempts != nil {
		w.Attempts = *attempts
	}
}

// compareTasks orders by run, then step, then index: the lock order of every batch.
func compareTasks(a, b poller.Task) int {
	if c := strings.Compare(a.RunID, b.RunID); c != 0 {
		return c
	}
	if c := strings.Compare(a.StepSlug, b.StepSlug); c != 0 {
		return c
	}
	return a.TaskIndex - b.TaskIndex
}
