package sandbox

import (
	"fmt"
	"runtime"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/instrument"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// tickSlice is how many units of work (about one WebAssembly instruction each, see package
// instrument) an instrumented guest runs between two calls of the host's tick: the
// longest stretch of guest code the Go runtime waits for (a collection's stop-the-world, the
// scheduler) and the delay before a guest past its deadline is stopped. Measured in
// docs/sandbox.md ("Preemption"): about 0.1 ms of loop-free recursion, a few ms at worst.
const tickSlice = 200_000

// yieldEvery is how much guest time passes before tick lets other goroutines run (the
// Go scheduler's own preemption comes only after 10 ms): with more runaway guests than
// cores, a cheap task or the collector waits for a few guests' yields, not their time slices.
const yieldEvery = time.Millisecond

// tickFunc is the host side of the instrumentation's checkpoints: the counter of work left
// in the slice ran out. It accounts the slice, stops a guest whose task is over (deadline,
// cancellation, fuel) and hands out the next slice. Being a call into Go, it is also where
// the Go scheduler and garbage collector get the goroutine back.
func (s *callState) tick(counter int64) (int64, error) {
	s.fuelUsed += s.sliceStart - counter
	s.sliceStart = 0
	if s.ctx != nil && s.ctx.Err() != nil {
		return 0, errInterrupted
	}
	if now := time.Now(); now.Sub(s.lastYield) >= yieldEvery {
		if !s.lastYield.IsZero() {
			runtime.Gosched()
		}
		s.lastYield = now
	}
	next := int64(tickSlice)
	if s.fuelLimit > 0 {
		left := s.fuelLimit - s.fuelUsed
		if left < 0 {
			return 0, s.fail(fuelExhausted(s.fuelLimit))
		}
		next = min(next, left)
	}
	s.sliceStart = next
	return next, nil
}

func fuelExhausted(limit int64) *hostAbort {
	return &hostAbort{kind: KindFuelExhausted, message: fmt.Sprintf("the task used up its fuel of %d units", limit)}
}

// meterFunc is the import the instrumentation adds; it is no part of the ABI, so guests
// cannot import it themselves (validation runs on the module as written).
var meterFunc = hostFunc{module: instrument.Module, name: instrument.Name,
	sig: wasmfile.FuncType{Params: []wasmfile.ValType{wasmfile.I64}, Results: []wasmfile.ValType{wasmfile.I64}},
	fn: func(s *callState, _ []byte, a []uint64) (uint64, error) {
		next, err := s.tick(int64(a[0]))
		return uint64(next), err
	}}

// settle accounts the part of the current slice a call used when it returned.
func (s *callState) settle(counter int64) {
	s.fuelUsed += s.sliceStart - counter
	s.sliceStart = counter
}
