package host

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

// tryAcquire reserves up to n slots and returns how many it got.
func (s *slots) tryAcquire(n int) int {
	if s == nil {
		return n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max > 0 {
		n = min(n, s.max-s.used)
	}
	if n < 0 {
		n = 0
	}
	s.used += n
	return n
}

func (s *slots) release(n int) {
	if s == nil || n == 0 {
		return
	}
	s.mu.Lock()
	wasFull := s.max > 0 && s.used >= s.max
	s.used -= n
	s.mu.Unlock()
	if wasFull && s.onFree != nil {
		s.onFree()
	}
}
