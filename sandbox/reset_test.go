package sandbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Every task starts in an instance equal to a new one, whether the engine made it anew or
// reset the last task's (wazero, for modules that can only change their memory and their
// globals): reset_probe traps on any global, memory byte or memory size a task before it
// left changed. wasmtime makes a new instance for every task; wazero makes one only when the
// last one grew its memory, trapped, or is still busy.
func TestAResetInstanceIsEqualToANewOne(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "reset_probe"), sandbox.ModuleConfig{})
		run := func(in string) {
			t.Helper()
			res, err := m.Run(context.Background(), task(in, 10*time.Second))
			if err != nil || string(res.Output) != `"ok"` {
				t.Fatalf("input %s: %q, %v: the instance held a task before's state", in, res.Output, err)
			}
		}
		for range 10 {
			run(`{}`)
		}
		made := sandbox.Instantiations(m)
		if engine == "wazero" && made != 1 {
			t.Errorf("wazero made %d instances for 10 tasks in a row, want 1 (reset between them)", made)
		}
		if engine != "wazero" && made != 10 {
			t.Errorf("%s made %d instances for 10 tasks, want 10", engine, made)
		}
		// A task that grows the memory leaves an instance that cannot be made new again.
		run(`{"a":1}`) // odd length: grows
		run(`{}`)
		if engine == "wazero" && sandbox.Instantiations(m) != made+1 {
			t.Errorf("after a task grew its memory: %d instances, want %d (the grown one closed)", sandbox.Instantiations(m), made+1)
		}
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 10 {
					in := `{}`
					if (i+j)%5 == 0 {
						in = `{"a":1}`
					}
					res, err := m.Run(context.Background(), task(in, 10*time.Second))
					if err != nil || string(res.Output) != `"ok"` {
						t.Errorf("task %d/%d: %q, %v", i, j, res.Output, err)
					}
				}
			}()
		}
		wg.Wait()
	})
}

// A module whose code writes its table is never reset: every task gets a new instance and
// finds the table as the module declares it.
func TestAnInstanceThatCanWriteItsTableIsNeverReset(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "table_write"), sandbox.ModuleConfig{})
		for i := range 5 {
			res, err := m.Run(context.Background(), task(`{}`, 10*time.Second))
			if err != nil || string(res.Output) != `1` {
				t.Fatalf("task %d: %q, %v: the table held a task before's write", i, res.Output, err)
			}
		}
		if got := sandbox.Instantiations(m); got != 5 {
			t.Errorf("%d instances for 5 tasks, want 5", got)
		}
	})
}

// A trap closes the instance: the next task gets a new one.
func TestATrapClosesTheInstance(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "unreachable"), sandbox.ModuleConfig{})
		for i := range 3 {
			if _, err := m.Run(context.Background(), task(`{}`, 10*time.Second)); err == nil {
				t.Fatalf("task %d did not trap", i)
			}
		}
		if got := sandbox.Instantiations(m); got != 3 {
			t.Error(fmt.Sprintf("%d instances for 3 trapping tasks, want 3", got))
		}
	})
}
