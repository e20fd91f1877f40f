package sandbox

import (
	"math/bits"
	"sync"
)

// linearMemories recycles the buffers behind wazero guests' linear memories. Every fresh
// instance needs one (128 KiB for a small C guest, 1 MiB and more for Rust and Go); allocating
// each from the Go heap made large-span allocation, zeroing, sweeping and returning pages to
// the OS the largest cost of a task. A pooled buffer is handed out all zero, as a new linear
// memory must be: buffers are cleared when they come back, and only the part a guest was
// given can be dirty.
var linearMemories memoryPool

// Buffers are pooled by capacity class: 64 KiB (one page) << class, up to 64 MiB.
const (
	memClassMin = 16 // 64 KiB
	memClasses  = 11 // 64 KiB .. 64 MiB
)

type memoryPool struct {
	classes [memClasses]sync.Pool // of *[]byte, len 0, cap 64 KiB << class, all zero
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
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:size]
	}
	return make([]byte, size, uint64(1)<<(memClassMin+c))
}

// put clears the part of b that was handed out and keeps it for another instance.
func (p *memoryPool) put(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || c < 1<<memClassMin {
		return // not one of ours (odd capacity): let the collector have it
	}
	class := bits.Len(uint(c)) - 1 - memClassMin
	if class >= memClasses {
		return
	}
	clear(b)
	b = b[:0]
	p.classes[class].Put(&b)
}
