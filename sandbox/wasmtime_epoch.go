//go:build wasmtime

package sandbox

// #include <stdint.h>
// extern void pgflow_set_epoch_callback(void *store, uintptr_t watch);
import "C"

import (
	"context"
	"runtime/cgo"
	"time"
	"unsafe"

	wasmtime "github.com/bytecodealliance/wasmtime-go/v39"
)

// A store runs in slices of epochCheck; at the end of each, wasmtime asks the store's
// epochWatch whether the call may go on: so a call stops within a slice of its context's
// cancellation (pgflow cancelled the task), not only at its deadline, which wasmtime's plain
// epoch deadline, fixed when the call begins, cannot do.
const epochCheck = 4 // ticks: 20 ms

// epochWatch is one store's view of the call it runs: read by the callback, which wasmtime
// calls on the calling goroutine, so no lock is needed.
type epochWatch struct {
	ctx         context.Context
	interrupted bool // the callback stopped the call
	handle      cgo.Handle
}

// watchEpochs installs the callback on a store. The watch is freed by release.
func watchEpochs(store *wasmtime.Store) *epochWatch {
	w := &epochWatch{ctx: context.Background()}
	w.handle = cgo.NewHandle(w)
	// wasmtime-go keeps the C store pointer as the first field of Store (unexported).
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(store))
	C.pgflow_set_epoch_callback(ptr, C.uintptr_t(w.handle))
	return w
}

// begin prepares a call under ctx: its first slice.
func (w *epochWatch) begin(ctx context.Context, store *wasmtime.Store) {
	w.ctx, w.interrupted = ctx, false
	store.SetEpochDeadline(w.nextSlice())
}

// nextSlice is how many ticks the call may run before it is asked again: a slice, or what
// is left to its deadline (+2: the first tick may come at once), 0 when it must stop.
func (w *epochWatch) nextSlice() uint64 {
	if w.ctx.Err() != nil {
		return 0
	}
	slice := uint64(epochCheck)
	if d, ok := w.ctx.Deadline(); ok {
		slice = min(slice, uint64(max(time.Until(d), 0)/epochTick)+2)
	}
	return slice
}

func (w *epochWatch) release() { w.handle.Delete() }

//export pgflowEpochDeadline
func pgflowEpochDeadline(h C.uintptr_t, delta *C.uint64_t) C.int {
	w := cgo.Handle(h).Value().(*epochWatch)
	next := w.nextSlice()
	if next == 0 || w.ctx.Err() != nil {
		w.interrupted = true
		return 1
	}
	*delta = C.uint64_t(next)
	return 0
}
