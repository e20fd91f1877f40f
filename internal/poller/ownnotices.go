package poller

import (
	"sync"
	"time"
)

// OwnNotices are the insert notifications the worker's own claiming commits are about to
// send. Such a commit inserted its successors' messages and started them itself (a claim,
// package worker): the read its notification would wake finds nothing, and where the claim
// left a successor behind, the worker rings the queue itself once the commit returns. So the
// listener drops one notification per expected commit, matched by the sending backend (a
// notification carries its PID) and channel. Other workers hear every notification.
//
// An expectation that no notification meets (the insert did not notify) lapses after
// ownNoticeTTL, so it can cost at most one later notification of that connection, whose
// queue the worker's own completion writes ring anyway.
type OwnNotices struct {
	mu sync.Mutex
	m  map[ownKey]ownNotice
}

type ownKey struct {
	pid     uint32
	channel string
}

type ownNotice struct {
	n     int
	until time.Time
}

// ownNoticeTTL is how long an expected notification is waited for.
const ownNoticeTTL = 2 * time.Second

// NewOwnNotices returns an empty set of expected notifications.
func NewOwnNotices() *OwnNotices { return &OwnNotices{m: map[ownKey]ownNotice{}} }

// Expect says that the transaction on the backend pid is about to commit an insert that
// notifies channel: call it before the commit is sent.
func (o *OwnNotices) Expect(pid uint32, channel string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := ownKey{pid, channel}
	e := o.m[k]
	e.n++
	e.until = time.Now().Add(ownNoticeTTL)
	o.m[k] = e
}

// Cancel takes back an Expect whose commit did not land, or did not insert what the
// expectation was for. It reports whether the expectation was still there: false where a
// notification met it already (and was dropped) or it lapsed.
func (o *OwnNotices) Cancel(pid uint32, channel string) bool { return o.take(pid, channel) }

// take consumes an expectation of a notification from pid on channel, if there is one.
func (o *OwnNotices) take(pid uint32, channel string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := ownKey{pid, channel}
	e, ok := o.m[k]
	if !ok {
		return false
	}
	if time.Now().After(e.until) {
		delete(o.m, k)
		return false
	}
	if e.n <= 1 {
		delete(o.m, k)
	} else {
		e.n--
		o.m[k] = e
	}
	return true
}
