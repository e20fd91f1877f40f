package sandbox

import "testing"

func TestMemoryPoolHandsOutZeroedBuffers(t *testing.T) {
	p := memoryPool{max: 64 << 20}
	for _, size := range []uint64{1 << 16, 2 << 16, 17 << 16, 3<<20 + 5} {
		b, _ := p.get(size, 0, nil)
		if uint64(len(b)) != size || uint64(cap(b)) < size {
			t.Fatalf("get(%d) gave len %d cap %d", size, len(b), cap(b))
		}
		for i := range b {
			b[i] = 0xAA // a guest leaves its memory dirty
		}
		p.put(b, nil)
		for range 3 { // whichever buffer comes back, it must be clean
			again, _ := p.get(size, 0, nil)
			for i, v := range again[:cap(again)] {
				if v != 0 {
					t.Fatalf("size %d: byte %d of a recycled buffer is %#x, want 0", size, i, v)
				}
			}
			p.put(again, nil)
		}
	}
}

// A buffer comes back dirty only in the ranges its module's instantiation overwrites, and
// only to that module: handed to another (or to no module) it is zero everywhere.
func TestBufferStaysDirtyOnlyForItsModule(t *testing.T) {
	for _, size := range []uint64{1 << 16, 3 << 20} { // a Go buffer, a mapping
		p := memoryPool{max: 64 << 20, mappedMax: 64 << 20}
		a := &overwritten{ranges: [][2]uint64{{100, 5000}, {9000, 9100}}}
		b, _ := p.get(size, 0, a)
		for i := range b {
			b[i] = 0xAA
		}
		p.put(b, a)
		again, _ := p.get(size, 0, a)
		for i, v := range again[:cap(again)] {
			inside := (i >= 100 && i < 5000) || (i >= 9000 && i < 9100)
			if v != 0 && !inside {
				t.Fatalf("size %d: byte %d is %#x outside the module's ranges", size, i, v)
			}
			if !inside && i < len(again) {
				again[i] = 0xAA
			}
		}
		p.put(again, a)
		for _, other := range []*overwritten{nil, {ranges: [][2]uint64{{0, 10}}}} {
			b, _ := p.get(size, 0, other)
			for i, v := range b[:cap(b)] {
				if v != 0 && (other == nil || i >= 10) {
					t.Fatalf("size %d: byte %d of a buffer another module left is %#x", size, i, v)
				}
			}
			p.put(b, nil)
		}
	}
}

func TestMemoryClasses(t *testing.T) {
	for n, want := range map[uint64]int{0: 0, 1: 0, 1 << 16: 0, 1<<16 + 1: 1, 1 << 17: 1, 17 << 16: 5, 4 << 20: 6, 4<<20 + 1: -1} {
		if got := classOf(n); got != want {
			t.Errorf("classOf(%d) = %d, want %d", n, got, want)
		}
	}
	p := memoryPool{max: 64 << 20}
	odd := make([]byte, 10, 100) // not a pooled capacity: dropped, never handed out
	odd[0] = 1
	p.put(odd, nil)
	if b, _ := p.get(10, 0, nil); cap(b) == 100 {
		t.Fatal("a buffer of a foreign capacity came back from the pool")
	}
}

// The pool never holds more than its maximum: the rest goes to the garbage collector (Go
// buffers) or back to the operating system (mappings).
func TestMemoryPoolIsBounded(t *testing.T) {
	for _, c := range []struct {
		size uint64
		pool *memoryPool
		want uint64
	}{
		{512 << 10, &memoryPool{max: 2 << 20}, 2 << 20},
		{3 << 20, &memoryPool{max: 8 << 20, mappedMax: 7 << 20}, 6 << 20}, // mappings count their used length
	} {
		var bufs [][]byte
		for range 10 {
			b, _ := c.pool.get(c.size, 0, nil)
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			c.pool.put(b, nil)
		}
		if got := c.pool.pooled(); got != c.want {
			t.Errorf("the pool holds %d bytes after ten buffers of %d came back, want %d", got, c.size, c.want)
		}
	}
}

// A mapping comes back zeroed whichever of its pages the guest touched, and only the
// touched ones stay resident.
func TestMappedBufferIsZeroedWhereTouched(t *testing.T) {
	p := memoryPool{mappedMax: 64 << 20}
	b, mapping := p.get(3<<20, 0, nil)
	for _, at := range []int{0, 4095, 4096, 1 << 20, 3<<20 - 1} {
		b[at] = 0xAA
	}
	p.put(b, nil)
	again, againMapping := p.get(3<<20, 0, nil)
	if &again[0] != &b[0] {
		t.Skip("this platform serves these buffers from the Go heap")
	}
	if !mapping || !againMapping {
		t.Fatalf("get called a mapping a Go buffer (%v, then %v): a reset would clear all of it", mapping, againMapping)
	}
	for i, v := range again[:cap(again)] {
		if v != 0 {
			t.Fatalf("byte %d of a recycled mapping is %#x, want 0", i, v)
		}
	}
	p.put(again, nil)
}

// Large memories are mapped outside the Go heap, grow without moving, and are unmapped.
func TestLargeMemoryIsMapped(t *testing.T) {
	st := &callState{lim: &limits{memoryLimit: 64 << 20}}
	m := &cappedMemory{st: st}
	small := m.Reallocate(1 << 20)
	small[0] = 7
	big := m.Reallocate(8 << 20)
	if !m.mapped {
		t.Skip("this platform serves large memories from the Go heap")
	}
	if big[0] != 7 || len(big) != 8<<20 {
		t.Fatalf("after growing: len %d, first byte %d", len(big), big[0])
	}
	big[len(big)-1] = 1
	bigger := m.Reallocate(60 << 20)
	if &bigger[0] != &big[0] || bigger[8<<20-1] != 1 || bigger[60<<20-1] != 0 {
		t.Fatal("growing a mapped memory moved or lost its content")
	}
	if m.Reallocate(64<<20+1) != nil || !st.memRefused {
		t.Fatal("growing past the limit was not refused")
	}
	m.Free()
}
