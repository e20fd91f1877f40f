package sandbox

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Linear memories of wazero guests come from two places (docs/sandbox.md, "Memory"):
//
//   - Small ones (up to pooledMax) from linearMemories, a pool of buffers zeroed but for
//     what the next instance's instantiation writes (overwritten, below). Every
//     fresh instance needs one (128 KiB for a small C guest, 1 MiB and more for Rust, 2.3
//     MiB for a JavaScript handler's snapshot); allocating each from the Go heap made
//     allocation, zeroing, sweeping and returning pages the largest cost of a task. Buffers
//     under offHeapMin are Go memory: the pool keeps at most poolBytes of them and leaves
//     the rest to the garbage collector. Larger ones are mappings outside the Go heap
//     (memory_unix.go): in the heap, each counted fully towards the collector's target, so
//     32 instances at once let the heap, and the resident memory, grow by twice their
//     capacity. A mapping only holds the pages its guests touched, only those are cleared
//     when it comes back (a JavaScript engine's 1 MiB stack is mostly never touched), and
//     the pool keeps mappings whose used lengths sum to at most mappedPoolBytes, unmapping
//     the rest.
//   - Larger ones from the operating system (memory_unix.go): the step's whole memory limit
//     is reserved as address space when the guest first grows past pooledMax, pages are
//     only backed once the guest touches them, growing never copies, and the mapping is
//     returned to the operating system the moment the instance is closed. The Go heap, and
//     so the collector, never sees them.
var linearMemories = memoryPool{max: poolBytes, mappedMax: mappedPoolBytes}

const (
	pooledMax       = 4 << 20  // the largest linear memory served from the pool
	poolBytes       = 32 << 20 // the most capacity the pool keeps in Go buffers
	offHeapMin      = 1 << 20  // the smallest capacity served as a mapping
	mappedPoolBytes = 96 << 20 // the most used length the pool keeps in mappings
)

// Buffers are pooled by capacity class: 64 KiB (one page) << class, up to pooledMax.
const (
	memClassMin = 16 // 64 KiB
	memClasses  = 7  // 64 KiB .. 4 MiB
)

// overwritten are the byte ranges of a linear memory that instantiating a module writes
// (its active data segments), sorted and apart: a buffer an instance of the module gave
// back need not be cleared there if an instance of the same module takes it next, since
// instantiation writes every byte of them before any of its code runs. For a JavaScript
// handler's snapshot that is most of what a task touches (docs/sandbox.md, "Memory").
type overwritten struct{ ranges [][2]uint64 }

// pooledBuffer is a buffer in the pool: zero everywhere but in dirty's ranges, where it
// holds whatever the last instance of dirty's module left (dirty nil: all zero).
type pooledBuffer struct {
	b     []byte // len 0
	dirty *overwritten
}

type memoryPool struct {
	mu    sync.Mutex
	free  [memClasses][]pooledBuffer // cap 64 KiB << class
	bytes uint64                     // capacity of the Go buffers held in free
	max   uint64
	// Mappings, by address: handed out (0) or held in free (the length last handed out,
	// which bounds the pages it keeps resident); mappedBytes sums the latter.
	mapped      map[*byte]uint64
	mappedBytes uint64
	mappedMax   uint64
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

// get returns a buffer of length size with at least capacity capHint (and size), zeroed
// but for what the caller overwrites (nil: zeroed everywhere): a buffer that module's
// instances gave back is preferred, and another one's dirty ranges are cleared. mapping says
// whether it is one of the pool's mappings, whose untouched pages are not resident.
func (p *memoryPool) get(size, capHint uint64, overwrites *overwritten) (b []byte, mapping bool) {
	want := max(size, capHint)
	c := classOf(want)
	if c < 0 {
		return make([]byte, size, want), false
	}
	p.mu.Lock()
	if n := len(p.free[c]); n > 0 {
		i := n - 1
		for j := i; j >= 0 && overwrites != nil; j-- {
			if p.free[c][j].dirty == overwrites {
				i = j
				break
			}
		}
		pb := p.free[c][i]
		p.free[c][i] = p.free[c][n-1]
		p.free[c] = p.free[c][:n-1]
		b := pb.b
		used, mapping := p.mapped[unsafe.SliceData(b)]
		if mapping {
			p.mappedBytes -= used
			p.mapped[unsafe.SliceData(b)] = 0
		} else {
			p.bytes -= uint64(cap(b))
		}
		p.mu.Unlock()
		if pb.dirty != nil && pb.dirty != overwrites {
			full := b[:cap(b)]
			for _, r := range pb.dirty.ranges {
				clear(full[r[0]:r[1]])
			}
		}
		return b[:size], mapping
	}
	p.mu.Unlock()
	n := uint64(1) << (memClassMin + c)
	if n >= offHeapMin {
		if b, ok := mapPages(n); ok {
			p.mu.Lock()
			if p.mapped == nil {
				p.mapped = map[*byte]uint64{}
			}
			p.mapped[&b[0]] = 0
			p.mu.Unlock()
			return b[:size], true
		}
	}
	return make([]byte, size, n), false
}

// put clears the part of b that was handed out, but for the ranges an instance of the
// module that used it overwrites (nil: all of it), and keeps it for another instance,
// unless the pool is full.
func (p *memoryPool) put(b []byte, overwrites *overwritten) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || c < 1<<memClassMin {
		return // not one of ours (odd capacity): let the collector have it
	}
	class := bits.Len(uint(c)) - 1 - memClassMin
	if class >= memClasses {
		return
	}
	p.mu.Lock()
	if _, ok := p.mapped[unsafe.SliceData(b)]; ok {
		used := max(uint64(len(b)), 1)
		full := p.mappedBytes+used > p.mappedMax
		if full {
			delete(p.mapped, unsafe.SliceData(b))
		} else {
			p.mappedBytes += used
			p.mapped[unsafe.SliceData(b)] = used
		}
		p.mu.Unlock()
		if full {
			unmapMemory(b)
			return
		}
		overwrites = within(overwrites, b)
		clearTouched(b, overwrites)
		p.mu.Lock()
		p.free[class] = append(p.free[class], pooledBuffer{b[:0], overwrites})
		p.mu.Unlock()
		return
	}
	full := p.bytes+uint64(c) > p.max
	if !full {
		p.bytes += uint64(c)
	}
	p.mu.Unlock()
	if full {
		return
	}
	overwrites = within(overwrites, b)
	clearExcept(b, overwrites)
	p.mu.Lock()
	p.free[class] = append(p.free[class], pooledBuffer{b[:0], overwrites})
	p.mu.Unlock()
}

// within returns o if all its ranges lie within b's length, else nil: a module's instances
// overwrite its ranges only in a memory of at least its initial size.
func within(o *overwritten, b []byte) *overwritten {
	if o == nil || len(o.ranges) == 0 || o.ranges[len(o.ranges)-1][1] > uint64(len(b)) {
		return nil
	}
	return o
}

// clearExcept zeroes b but for o's ranges.
func clearExcept(b []byte, o *overwritten) {
	var at uint64
	if o != nil {
		for _, r := range o.ranges {
			clear(b[at:r[0]])
			at = r[1]
		}
	}
	clear(b[at:])
}

// pooled is how many bytes the pool holds: the capacity of its Go buffers and the used
// length of its mappings.
func (p *memoryPool) pooled() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes + p.mappedBytes
}
