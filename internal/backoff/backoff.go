// Package backoff spaces out retries and idle polls.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff spaces out polls of an idle queue (or retries) with decorrelated jitter: each wait is random
// between Min and three times the previous wait, capped at Max. Workers that go idle together
// drift apart instead of polling in lockstep. Reset returns to Min when work is found.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the next wait: Min right after a Reset (or at first), then growing.
func (b *Backoff) Next() time.Duration {
	if b.cur < b.Min {
		b.cur = b.Min
		return b.Min
	}
	hi := b.cur * 3
	if hi > b.Max {
		hi = b.Max
	}
	d := b.Min
	if hi > b.Min {
		d += rand.N(hi - b.Min)
	}
	b.cur = d
	return d
}

// Reset makes the next wait start from Min again.
func (b *Backoff) Reset() { b.cur = 0 }
