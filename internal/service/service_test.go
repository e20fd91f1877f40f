package service_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
)

func TestGroupStopsInReverseAndUndoesAFailedStart(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []string
	record := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	part := func(name string, fail bool) service.Service {
		return &service.Func{
			OnStart: func(context.Context) error {
				record("start " + name)
				if fail {
					return errors.New(name + " refused")
				}
				return nil
			},
			OnStop: func() { record("stop " + name) },
		}
	}
	var g service.Group
	if err := g.Start(context.Background(), part("a", false), part("b", false)); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	g.Stop() // a second Stop stops nothing twice
	if err := g.Start(context.Background(), part("c", false), part("d", true), part("e", false)); err == nil {
		t.Fatal("a failed start returned no error")
	}
	want := []string{"start a", "start b", "stop b", "stop a", "start c", "start d", "stop c"}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events = %q, want %q", events, want)
	}
}

func TestLoopRunsUntilStopAndOutlivesItsStartContext(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{})
	running := make(chan struct{})
	l := service.NewLoop(func(ctx context.Context) {
		close(running)
		<-ctx.Done()
		close(ended)
	})
	l.Stop() // before Start: nothing to stop
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-running
	cancel() // the start context ending does not stop the loop
	select {
	case <-ended:
		t.Fatal("the loop ended with its start context")
	default:
	}
	l.Stop()
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the loop ended")
	}
	l.Stop()
}

// Started and Stopped are the events an observer waits on instead of sleeping: Started once
// Start succeeded, Stopped once the part ended; a failed start never says Started.
func TestStartedAndStoppedFollowTheLifecycle(t *testing.T) {
	t.Parallel()
	l := service.NewLoop(func(ctx context.Context) { <-ctx.Done() })
	select {
	case <-l.Started():
		t.Fatal("Started before Start")
	default:
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-l.Started()
	select {
	case <-l.Stopped():
		t.Fatal("Stopped while running")
	default:
	}
	l.Stop()
	<-l.Stopped()

	refused := &service.Func{OnStart: func(context.Context) error { return errors.New("no") }}
	var g service.Group
	if err := g.Start(context.Background(), refused); err == nil {
		t.Fatal("a refused start returned no error")
	}
	select {
	case <-refused.Started():
		t.Fatal("a refused start said Started")
	default:
	}
}

// EndWith records why a part ended, readable once it has: the first end counts, and Err
// says nothing before Stopped is closed.
func TestEndWithKeepsTheFirstReason(t *testing.T) {
	t.Parallel()
	var s service.State
	if err := s.Err(); err != nil {
		t.Fatalf("Err before the end = %v", err)
	}
	first := errors.New("first")
	s.EndWith(first)
	s.EndWith(errors.New("second"))
	<-s.Stopped()
	if err := s.Err(); err != first {
		t.Fatalf("Err = %v, want the first reason", err)
	}
}

// Every calls its function once an interval, never before the first interval, and returns
// when its context ends.
func TestEveryCallsOnceAnIntervalUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan time.Time, 100)
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		service.Every(ctx, 20*time.Millisecond, func(context.Context) { calls <- time.Now() })
	}()
	first := <-calls
	if first.Sub(began) < 20*time.Millisecond {
		t.Errorf("first call after %s, before one interval", first.Sub(began))
	}
	<-calls
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Every did not return once its context ended")
	}
}
