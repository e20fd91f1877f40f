package httpcap

import (
	"context"
	"errors"
	"time"
)

// Call is a request that Start sent in a goroutine of its own, so the guest can go on (run
// its timers) and then wait for it a while at a time, or cancel it.
type Call struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	resp   *Response
	err    *Error
}

// errCanceled is the cause of a Call's context when the handler cancels it.
var errCanceled = errors.New("canceled by the handler")

// Start checks a request as Do does and sends it in the background. A refusal comes back at
// once, and no request runs. Until the Call is done, the session refuses other requests.
func (s *Session) Start(ctx context.Context, r Request) (*Call, *Error) {
	req, err := s.prepare(ctx, r)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	req = req.WithContext(callCtx)
	c := &Call{cancel: cancel, done: make(chan struct{})}
	s.running = c
	go func() {
		defer close(c.done)
		defer cancel(nil)
		c.resp, c.err = s.send(callCtx, req)
	}()
	return c, nil
}

// Wait waits at most d (a negative d: as long as it takes) for the call to end, or until ctx
// is done; it reports whether the call has ended.
func (c *Call) Wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-c.done:
		return true
	default:
	}
	if d == 0 {
		return false
	}
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.done:
		return true
	case <-timeout:
		return false
	case <-ctx.Done():
		return false
	}
}

// Result is the call's response or error, once Wait reported it ended.
func (c *Call) Result() (*Response, *Error) {
	<-c.done
	return c.resp, c.err
}

// Cancel stops the call and waits until its goroutine has ended, its connection closed (a
// call that ended already is left as it was).
func (c *Call) Cancel() {
	c.cancel(errCanceled)
	<-c.done
}
