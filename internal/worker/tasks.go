package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/requeueguard"
)

// taskSet is the tasks this worker runs or has outcomes of that are not written yet. The
// orphan hand-back (orphans.go), the requeue guard and cancellation (cancel.go) read it.
type taskSet struct {
	mu    sync.Mutex
	tasks map[taskKey]*knownTask
	// written remembers the last writtenCap attempts whose outcome was committed (for at
	// most writtenFor): a task the database later holds as started by one of them lost that
	// commit (a failover). ring holds the same keys in the order they came, to forget the
	// oldest: memory stays bounded whatever the throughput.
	written map[writtenKey]time.Time
	ring    []writtenKey
	next    int
	// forgotten are tasks whose fate the worker lost (a transactional step's COMMIT whose
	// answer never came): no longer known, so the hand-back returns them to pgflow if they
	// are still started, without waiting for a round free of fetches.
	forgotten map[taskKey]forgottenTask
}

type forgottenTask struct {
	attempt int
	reason  string
	at      time.Time
}

type writtenKey struct {
	taskKey
	attempt int
}

// writtenFor is how long a written outcome is remembered: longer than a failover and the
// recovery rounds after it take. writtenCap bounds how many (about 5 MB): at 2,000 tasks a
// second that is the last half minute, still longer than the recovery rounds that notice.
const (
	writtenFor = 10 * time.Minute
	writtenCap = 1 << 16
)

// knownTask is one task from launch until its outcome is written.
type knownTask struct {
	task fetched.Task
	// cancel stops the handler with a cause (a *cancelled); nil once the handler ended.
	cancel context.CancelCauseFunc
}

type taskKey struct {
	run, step string
	index     int
}

func keyOf(t *fetched.Task) taskKey { return taskKey{t.RunID, t.StepSlug, t.TaskIndex} }

// add records a task about to run and returns the context its handler runs under.
func (s *taskSet) add(parent context.Context, t *fetched.Task) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	s.mu.Lock()
	if s.tasks == nil {
		s.tasks = map[taskKey]*knownTask{}
	}
	s.tasks[keyOf(t)] = &knownTask{task: *t, cancel: cancel}
	s.mu.Unlock()
	return ctx
}

// handlerEnded marks a task's handler as ended: it can no longer be cancelled. Only the
// same attempt's entry is touched: a task taken back and started again on this worker
// while its earlier attempt still ran has the later attempt's entry.
func (s *taskSet) handlerEnded(t *fetched.Task) {
	s.mu.Lock()
	if k := s.tasks[keyOf(t)]; k != nil && k.cancel != nil && k.task.Attempt == t.Attempt {
		k.cancel(nil) // releases the context's resources
		k.cancel = nil
	}
	s.mu.Unlock()
}

// startedBefore returns the tasks started before t (the requeue guard locks them).
func (s *taskSet) startedBefore(t time.Time) []requeueguard.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []requeueguard.Task
	for _, k := range s.tasks {
		if k.task.StartedAt.Before(t) {
			out = append(out, requeueguard.Task{RunID: k.task.RunID, StepSlug: k.task.StepSlug, TaskIndex: k.task.TaskIndex})
		}
	}
	return out
}

// running returns the tasks whose handlers run and were started before t.
func (s *taskSet) running(before time.Time) []fetched.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []fetched.Task
	for _, k := range s.tasks {
		if k.cancel != nil && k.task.StartedAt.Before(before) {
			out = append(out, k.task)
		}
	}
	return out
}

// cancel stops the running handler of a task (of this attempt) with why; it reports
// whether a handler was running.
func (s *taskSet) cancel(key taskKey, attempt int, why *cancelled) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.tasks[key]
	if k == nil || k.cancel == nil || k.task.Attempt != attempt {
		return false
	}
	k.cancel(why)
	k.cancel = nil
	return true
}

// cancelRun stops the running handlers of every task of a run; it returns how many.
func (s *taskSet) cancelRun(runID string, why *cancelled) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for key, k := range s.tasks {
		if key.run == runID && k.cancel != nil {
			k.cancel(why)
			k.cancel = nil
			n++
		}
	}
	return n
}

// wrote records that an attempt's outcome was committed, forgetting old records.
func (s *taskSet) wrote(t *fetched.Task, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = map[writtenKey]time.Time{}
		s.ring = make([]writtenKey, writtenCap)
	}
	k := writtenKey{keyOf(t), t.Attempt}
	if old := s.ring[s.next]; old.run != "" {
		delete(s.written, old)
	}
	s.ring[s.next] = k
	s.next = (s.next + 1) % writtenCap
	s.written[k] = now
}

// writtenAt says when an attempt's outcome was committed, if it is remembered.
func (s *taskSet) writtenAt(k taskKey, attempt int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.written[writtenKey{k, attempt}]
	return at, ok && time.Since(at) <= writtenFor
}

func (s *taskSet) remove(t *fetched.Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.tasks[keyOf(t)]
	if k == nil || k.task.Attempt != t.Attempt {
		return // another attempt's entry (see handlerEnded)
	}
	if k.cancel != nil {
		k.cancel(nil)
	}
	delete(s.tasks, keyOf(t))
}

// forget drops a task whose outcome the worker cannot know, remembering why.
func (s *taskSet) forget(t *fetched.Task, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.tasks[keyOf(t)]; k != nil && k.task.Attempt == t.Attempt {
		if k.cancel != nil {
			k.cancel(nil)
		}
		delete(s.tasks, keyOf(t))
	}
	if s.forgotten == nil {
		s.forgotten = map[taskKey]forgottenTask{}
	}
	s.forgotten[keyOf(t)] = forgottenTask{attempt: t.Attempt, reason: reason, at: time.Now()}
}

// forgottenReason says why the worker forgot this attempt of a task, if it did.
func (s *taskSet) forgottenReason(k taskKey, attempt int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.forgotten[k]
	if !ok || f.attempt != attempt {
		return "", false
	}
	return f.reason, true
}

// settleForgotten drops forgotten tasks that pgflow no longer holds as started by this
// worker: listed is what it held when read at readAt. A task forgotten just before the
// read may be too young for the list (it lists tasks started at least 2 s ago), so only
// older ones are dropped.
func (s *taskSet) settleForgotten(listed map[taskKey]bool, readAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, f := range s.forgotten {
		if !listed[k] && f.at.Before(readAt.Add(-5*time.Second)) {
			delete(s.forgotten, k)
		}
	}
}

func (s *taskSet) has(k taskKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tasks[k]
	return ok
}

// cancelled is why pgflow no longer wants a task's outcome: the cause its handler's
// context is cancelled with.
type cancelled struct {
	status string // the task's status now: cancelled, skipped, failed, queued...
	reason string // for logs: "its run failed", "its step was skipped"...
}

func (c *cancelled) Error() string { return "cancelled by pgflow: " + c.reason }

// cancelCause returns why a task's handler was cancelled by pgflow, or nil.
func cancelCause(ctx context.Context) *cancelled {
	var c *cancelled
	if errors.As(context.Cause(ctx), &c) {
		return c
	}
	return nil
}
