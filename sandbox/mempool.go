package sandbox

import (
	"math/bits"
	"sync"
)

// Linear memories of wazero guests come from two places (docs/sandbox.md, "Memory"):
//
//   - Small ones (up to pooledMax) from linearMemories, a pool of zeroed Go buffers. Every
//     fresh instance needs one (128 KiB for a small C guest, 1 MiB and more for Rust);
//     allocating each from the Go heap made allocation, zeroing, sweeping and returning
//     pages the largest cost of a task. The pool keeps at most poolBytes: what comes back
//     beyond that is left to the garbage collector.
//   - Larger ones from the operating system (memory_unix.go): the step's whole memory limit
//     is reserved as address space when the guest first grows past pooledMax, pages are
//     only backed once the guest touches them, growing never copies, and the mapping is
//     returned to the operating system the moment the instance is closed. The Go heap, and
//     so the collector, never sees them.
var linearMemories = memoryPool{max: poolBytes}

const (
	pooledMax = 4 << 20  // the largest linear memory served from the pool
	poolBytes = 32 << 20 // the most the pool keeps
)

// Buffers are pooled by capacity class: 64 KiB (one page) << class, up to pooledMax.
const (
	memClassMin = 16 // 64 KiB
	memClasses  = 7  // 64 KiB .. 4 MiB
)

type memoryPool struct {
	mu    sync.Mutex
	free  [memClasses][][]byte // len 0, cap 64 KiB << class, all zero
	bytes uint64               // capacity held in free
	max   uint64
}

// classOf returns the smallest class whose buffers hold n bytes, or -1 when none does.
func classOf(n uint64) int {
	if n <= 1<<memClassMin {
		return 0
	}
	c := bits.Len64(n-1) - memClassMin
	if c >= memClasses {
		return -1
	}
	return c
}

// get returns a zeroed buffer of length size with at least capacity capHint (and size).
func (p *memoryPool) get(size, capHint uint64) []byte {
	want := max(size, capHint)
	c := classOf(want)
	if c < 0 {
		return make([]byte, size, want)
	}
	p.mu.Lock()
	if n := len(p.free[c]); n > 0 {
		b := p.free[c][n-1]
		p.free[c] = p.free[c][:n-1]
		p.bytes -= uint64(cap(b))
		p.mu.Unlock()
		return b[:size]
	}
	p.mu.Unlock()
	return make([]byte, size, uint64(1)<<(memClassMin+c))
}

// put clears the part of b that was handed out and keeps it for another instance, unless
// the pool is full.
func (p *memoryPool) put(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || c < 1<<memClassMin {
		return // not one of ours (odd capacity): let the collector have it
	}
	class := bits.Len(uint(c)) - 1 - memClassMin
	if class >= memClasses {
		return
	}
	p.mu.Lock()
	full := p.bytes+uint64(c) > p.max
	if !full {
		p.bytes += uint64(c)
	}
	p.mu.Unlock()
	if full {
		return
	}
	clear(b)
	p.mu.Lock()
	p.free[class] = append(p.free[class], b[:0])
	p.mu.Unlock()
}

// pooled is how many bytes the pool holds.
func (p *memoryPool) pooled() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}
