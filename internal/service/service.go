// Package service gives the worker's background parts one lifecycle. Start launches a part
// and returns once it runs, or with the reason it could not start; Stop ends it and returns
// once it has ended (safe to call twice, or on a part that never started). A Group starts
// parts in order and stops them in the reverse order, so a part can rely on those started
// before it for its whole life.
package service

import (
	"context"
	"sync"
)

// Service is a background part of the worker.
type Service interface {
	// Start launches the part. ctx carries values and bounds the start only: the part runs
	// until Stop, whatever happens to ctx afterwards.
	Start(ctx context.Context) error
	// Stop ends the part and waits until it has ended.
	Stop()
}

// Loop is a Service that runs one function on a goroutine of its own until Stop cancels
// the function's context: the shape of every periodic part (sweeps, heartbeats, locks).
type Loop struct {
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
		defer close(done)
		l.run(ctx)
	}()
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

// Func adapts a pair of functions to a Service.
type Func struct {
	OnStart func(ctx context.Context) error
	OnStop  func()
}

// Start calls OnStart, when set.
func (f Func) Start(ctx context.Context) error {
	if f.OnStart == nil {
		return nil
	}
	return f.OnStart(ctx)
}

// Stop calls OnStop, when set.
func (f Func) Stop() {
	if f.OnStop != nil {
		f.OnStop()
	}
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
