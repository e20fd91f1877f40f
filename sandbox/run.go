package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// module is a loaded module of either engine; the engine-specific part is compiled.
type module struct {
	eng      *engine
	info     Info
	compiled compiledModule
	lim      limits
	reuse    bool
	caps     Capabilities
	hasInit  bool
	life     refs // one reference per running call (abandoned ones included)

	// instantiated counts the instances made for tasks (tests tell reset from new by it).
	instantiated atomic.Int64

	mu sync.Mutex
	// idle are instances kept for the next task: as the last task left them with
	// ReuseInstance, reset to equal new ones otherwise (reset.go).
	idle []*instance
}

// instance is a live guest instance with the state its host functions use.
type instance struct {
	g    guestInstance
	st   *callState
	held int64 // the bytes it counts in engine.readyBytes while idle after a reset
}

func (m *module) Info() Info { return m.info }

func (m *module) Run(ctx context.Context, t Task) (Result, error) {
	start := time.Now()
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if max := m.eng.cfg.MaxInputBytes; len(t.Input) > max {
		return Result{}, &Error{Kind: KindInputTooLarge, Message: fmt.Sprintf(
			"the task input is %s, over the limit of %s (the worker's --max-input-size)", bytesize.Text(uint64(len(t.Input))), bytesize.Text(uint64(max)))}
	}
	if !m.life.acquire() {
		return Result{}, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	o, abandoned := m.eng.supervise(ctx, func(stopped func()) outcome {
		defer m.life.done()
		return m.execute(ctx, t, timeout, stopped)
	})
	switch {
	case abandoned && errors.Is(ctx.Err(), context.Canceled):
		// Both engines stop a canceled guest within milliseconds; this is a guest that did
		// not stop within WatchdogGrace (a machine far too loaded).
		o = outcome{err: &Error{Kind: KindCanceled, Message: "the call was canceled (the guest had not stopped yet)"}}
	case abandoned:
		// The guest is still running on the abandoned goroutine, which owns its state:
		// nothing of it can be read here.
		o = outcome{err: &Error{Kind: KindTimeout, Message: timeoutMessage(timeout) +
			" (the engine could not stop the guest: its call was abandoned)"}}
	}
	o.res.Duration = time.Since(start)
	return o.res, o.err
}

// execute runs one task on a reused or fresh instance and classifies what happened. It
// runs on the supervised goroutine and disposes of the instance itself. stopped is called
// once no guest code of the task can run any more: what follows (classifying, closing the
// instance, giving its memory back) is the host's own work, which the watchdog waits for.
func (m *module) execute(ctx context.Context, t Task, timeout time.Duration, stopped func()) outcome {
	inst := m.takeIdle()
	if inst != nil && m.reuse {
		inst.st.beginTask(ctx, t.Input, t.Context, timeout)
		inst.st.seed, inst.st.sql, inst.st.fixedClock = t.Seed, t.SQL, t.FixedClock
	} else {
		st := newCallState(&m.lim, &m.caps, m.info.Mode == ModeCommand)
		st.beginTask(ctx, t.Input, t.Context, timeout)
		st.seed, st.sql, st.fixedClock = t.Seed, t.SQL, t.FixedClock
		if inst != nil { // a reset instance: equal to a new one
			inst.g.adopt(st)
			inst.st = st
		} else {
			g, err := m.compiled.instantiate(ctx, st)
			if err != nil {
				stopped()
				st.endTask()
				return m.classifyFailure(ctx, st, nil, err, "instantiating the module")
			}
			m.instantiated.Add(1)
			inst = &instance{g: g, st: st}
		}
		if m.hasInit {
			if _, err := inst.g.call(ctx, abi.ExportInitialize); err != nil {
				stopped()
				st.endTask()
				o := m.classifyFailure(ctx, st, inst.g, err, "calling "+abi.ExportInitialize)
				o.res.FuelUsed = st.fuelUsed
				inst.g.close(context.Background())
				return o
			}
		}
	}
	var status uint64
	var err error
	if m.info.Mode == ModeCommand {
		_, err = inst.g.call(ctx, abi.ExportStart)
	} else {
		status, err = inst.g.call(ctx, abi.ExportHandle, uint64(len(t.Input)), uint64(len(t.Context)))
	}
	stopped()
	o := m.classify(ctx, inst, status, err)
	o.res.FuelUsed = inst.st.fuelUsed
	// Before the instance can go to another task: the state is then that task's.
	inst.st.endTask()
	switch {
	case o.err == nil && m.reuse:
		m.putIdle(inst)
	case err == nil && !m.reuse && m.keepReset(inst):
		// The call returned (a handler error included): reset and kept for the next task.
	default:
		inst.g.close(context.Background())
	}
	return o
}

// keepReset resets an instance whose call returned and keeps it for the next task, within
// readyMax; it says whether it did.
func (m *module) keepReset(inst *instance) bool {
	held := int64(inst.g.heldBytes())
	if m.eng.readyBytes.Add(held) > readyMax {
		m.eng.readyBytes.Add(-held)
		return false
	}
	if !inst.g.reset() {
		m.eng.readyBytes.Add(-held)
		return false
	}
	inst.held = held
	inst.g.adopt(nil) // nothing of the last task stays reachable from the idle instance
	inst.st = nil
	m.putIdle(inst)
	return true
}

func (m *module) takeIdle() *instance {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.idle); n > 0 {
		inst := m.idle[n-1]
		m.idle = m.idle[:n-1]
		m.eng.readyBytes.Add(-inst.held)
		inst.held = 0
		return inst
	}
	return nil
}

// putIdle keeps a healthy instance for the next task. The caller still holds its call
// reference, so Close's release (which empties idle) cannot have run yet.
func (m *module) putIdle(inst *instance) {
	m.mu.Lock()
	m.idle = append(m.idle, inst)
	m.mu.Unlock()
}

// Close releases the module once its running calls have ended.
func (m *module) Close(ctx context.Context) error {
	m.life.close(func() {
		m.mu.Lock()
		idle := m.idle
		m.idle = nil
		m.mu.Unlock()
		for _, inst := range idle {
			m.eng.readyBytes.Add(-inst.held)
			inst.g.close(context.Background())
		}
		_ = m.compiled.close(context.Background())
		m.eng.forget(m)
		m.eng.life.done()
	})
	return nil
}
