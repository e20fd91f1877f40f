// Package service gives every long-lived part of the worker one lifecycle, from the Client's
// supervisor down to each queue's fetch loop. Start launches a part and returns once it runs,
// or with the reason it could not start; Stop ends it and returns once it has ended (safe to
// call twice, or on a part that never started); Started is closed once Start succeeded, so
// an observer (a readiness probe, a test) waits on the event instead of sleeping. A Group
// starts parts in order and stops them in the reverse order, so a part can rely on those
// started before it for its whole life.
package service

import (
	"context"
	"sync"
	"time"
)

// Service is a long-lived part of the worker.
type Service interface {
	// Start launches the part. ctx carries values and bounds the start only: the part runs
	// until Stop, whatever happens to ctx afterwards.
	Start(ctx context.Context) error
	// Started is closed once Start has succeeded.
	Started() <-chan struct{}
	// Stop ends the part and waits until it has ended.
	Stop()
}

// State records a service's start and end for its Started and Stopped channels, and why it
// ended; a service embeds it and calls SetStarted at the end of a successful Start,
// SetStopped (or EndWith) once it ended. The zero value is ready to use.
type State struct {
	mu               sync.Mutex
	started, stopped chan struct{}
	err              error // set by EndWith, read once stopped is closed
}

func (s *State) channels() (started, stopped chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started == nil {
		s.started, s.stopped = make(chan struct{}), make(chan struct{})
	}
	return s.started, s.stopped
}

// Started is closed once the service has started.
func (s *State) Started() <-chan struct{} { started, _ := s.channels(); return started }

// Stopped is closed once the service has ended.
func (s *State) Stopped() <-chan struct{} { _, stopped := s.channels(); return stopped }

// SetStarted closes Started (once).
func (s *State) SetStarted() { started, _ := s.channels(); closeOnce(started) }

// SetStopped closes Stopped (once).
func (s *State) SetStopped() { _, stopped := s.channels(); closeOnce(stopped) }

// EndWith records why the service ended, then closes Stopped (the first end counts).
func (s *State) EndWith(err error) {
	_, stopped := s.channels()
	s.mu.Lock()
	select {
	case <-stopped:
	default:
		s.err = err
	}
	s.mu.Unlock()
	closeOnce(stopped)
}

// Err is why the service ended, once Stopped is closed (nil before, and after an end
// without an error).
func (s *State) Err() error {
	_, stopped := s.channels()
	select {
	case <-stopped:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.err
	default:
		return nil
	}
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// Loop is a Service that runs one function on a goroutine of its own until Stop cancels
// the function's context: the shape of every periodic part (sweeps, heartbeats, locks) and
// of each queue's fetch loop.
type Loop struct {
	State
	run func(ctx context.Context)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewLoop returns a Loop that runs run until its context ends.
func NewLoop(run func(ctx context.Context)) *Loop { return &Loop{run: run} }

// Start runs the function; a second Start while it runs does nothing.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.done = cancel, make(chan struct{})
	done := l.done
	go func() {
		defer l.SetStopped()
		defer close(done)
		l.run(ctx)
	}()
	l.SetStarted()
	return nil
}

// Stop cancels the function's context and waits for it to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// Every calls fn each interval, the first time one interval after it is called, until ctx
// ends: the body of a periodic Loop.
func Every(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// Func adapts a pair of functions to a Service.
type Func struct {
	State
	OnStart func(ctx context.Context) error
	OnStop  func()
}

// Start calls OnStart, when set.
func (f *Func) Start(ctx context.Context) error {
	if f.OnStart != nil {
		if err := f.OnStart(ctx); err != nil {
			return err
		}
	}
	f.SetStarted()
	return nil
}

// Stop calls OnStop, when set.
func (f *Func) Stop() {
	if f.OnStop != nil {
		f.OnStop()
	}
	f.SetStopped()
}

// Group starts services in order and stops them in reverse.
type Group struct {
	mu      sync.Mutex
	started []Service
}

// Start starts each service in turn. When one fails, those already started are stopped
// again (in reverse) and its error is returned.
func (g *Group) Start(ctx context.Context, services ...Service) error {
	for _, s := range services {
		if s == nil {
			continue
		}
		if err := s.Start(ctx); err != nil {
			g.Stop()
			return err
		}
		g.mu.Lock()
		g.started = append(g.started, s)
		g.mu.Unlock()
	}
	return nil
}

// Stop stops every started service, the last started first.
func (g *Group) Stop() {
	g.mu.Lock()
	started := g.started
	g.started = nil
	g.mu.Unlock()
	for i := len(started) - 1; i >= 0; i-- {
		started[i].Stop()
	}
}
