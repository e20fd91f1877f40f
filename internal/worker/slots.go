package worker

import "sync"

// slots counts concurrent tasks against a limit. Fetch loops reserve up to a batch of slots
// before reading, so the worker never reads more messages than it can run at once.
type slots struct {
	mu   sync.Mutex
	used int
	max  int // 0 = unlimited
	// onFree runs (outside the lock) when a release turns a full counter into a non-full one,
	// so fetch loops that found no slot poll again at once.
	onFree func()
}

// tryAcquireLeaving reserves up to n slots while keep stay free, and returns how many it got.
func (s *slots) tryAcquireLeaving(n, keep int) int {
	if s == nil {
		return n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max > 0 {
		n = min(n, s.max-s.used-keep)
	}
	if n < 0 {
		n = 0
	}
	s.used += n
	return n
}

// release frees the slots of tasks that ended, and wakes whoever waits for one.
func (s *slots) release(n int) {
	if s.give(n) && s.onFree != nil {
		s.onFree()
	}
}

// giveBack returns reserved slots that a fetch did not fill, without ringing onFree: the
// fetch found fewer tasks than it reserved for, so polling again at once would find none
// either. (It did ring once: an idle flow with max_concurrency reserved every slot, the
// empty fetch gave them back, the give-back rang the flow's own wake, and the loop read the
// empty queue again at once, thousands of times a second.)
func (s *slots) giveBack(n int) { s.give(n) }

// give returns n slots and reports whether the counter was full before.
func (s *slots) give(n int) (wasFull bool) {
	if s == nil || n == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	wasFull = s.max > 0 && s.used >= s.max
	s.used -= n
	return wasFull
}
