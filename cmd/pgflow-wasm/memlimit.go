package main

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// Go's soft memory limit for serve (docs/RATIONALE.md "Defaults: 32 handlers at once, batches
// of 32, GOGC 400 and a soft memory limit"). GOGC 400 lets the heap grow to five times its live
// size, and the live heap grows with the handlers running (each holds its instance's
// structures and wazero's call stack: about 0.35 MB for a TypeScript task) and with the steps
// loaded (a TypeScript step's compiled snapshot: a few MB). auto caps the growth at a floor
// that scales with --concurrency, and never less than some headroom above the live heap
// (re-read every second), so that many steps or a high --concurrency do not leave the
// collector running flat out under a limit their live data fills.
const (
	floorBase          = 16 << 20
	floorPerHandler    = 768 << 10
	headroomBase       = 8 << 20
	headroomPerHandler = 256 << 10
	liveHeapEvery      = time.Second
)

// memoryLimit is --soft-memory-limit: the larger of floor and the live heap plus headroom
// (a fixed size: the floor alone); both zero: none.
type memoryLimit struct {
	floor, headroom int64
}

// parseMemoryLimit reads --soft-memory-limit: "auto", a size such as 96MiB, or 0 for none.
func parseMemoryLimit(value string, concurrency int) (memoryLimit, error) {
	if value == "auto" {
		n := int64(max(concurrency, 1))
		return memoryLimit{floor: floorBase + n*floorPerHandler, headroom: headroomBase + n*headroomPerHandler}, nil
	}
	n, ok := bytesize.Parse(value)
	if !ok {
		return memoryLimit{}, fmt.Errorf("--soft-memory-limit: %q is not auto, 0 or a size such as 96MiB", value)
	}
	return memoryLimit{floor: int64(n)}, nil
}

// holders counts the serves holding a limit in this process (tests run several): the last to
// end puts back the limit from before the first.
var holders struct {
	sync.Mutex
	n      int
	before int64
}

// hold sets the limit until ctx ends (with headroom: the live heap the last collection found
// is read again every liveHeapEvery), then puts back the one before.
func (l memoryLimit) hold(ctx context.Context) {
	if l.floor <= 0 && l.headroom <= 0 {
		return
	}
	holders.Lock()
	if holders.n == 0 {
		holders.before = debug.SetMemoryLimit(-1)
	}
	holders.n++
	holders.Unlock()
	defer func() {
		holders.Lock()
		if holders.n--; holders.n == 0 {
			debug.SetMemoryLimit(holders.before)
		}
		holders.Unlock()
	}()
	debug.SetMemoryLimit(l.floor)
	if l.headroom <= 0 {
		<-ctx.Done()
		return
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	tick := time.NewTicker(liveHeapEvery)
	defer tick.Stop()
	for {
		metrics.Read(live)
		if live[0].Value.Kind() == metrics.KindUint64 {
			debug.SetMemoryLimit(max(l.floor, min(int64(live[0].Value.Uint64()), math.MaxInt64-l.headroom)+l.headroom))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
