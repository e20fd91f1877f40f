package sandbox

import "testing"

func TestMemoryPoolHandsOutZeroedBuffers(t *testing.T) {
	var p memoryPool
	for _, size := range []uint64{1 << 16, 2 << 16, 17 << 16, 3<<20 + 5} {
		b := p.get(size, 0)
		if uint64(len(b)) != size || uint64(cap(b)) < size {
			t.Fatalf("get(%d) gave len %d cap %d", size, len(b), cap(b))
		}
		for i := range b {
			b[i] = 0xAA // a guest leaves its memory dirty
		}
		p.put(b)
		for range 3 { // whichever buffer comes back, it must be clean
			again := p.get(size, 0)
			for i, v := range again[:cap(again)] {
				if v != 0 {
					t.Fatalf("size %d: byte %d of a recycled buffer is %#x, want 0", size, i, v)
				}
			}
			p.put(again)
		}
	}
}

func TestMemoryClasses(t *testing.T) {
	for n, want := range map[uint64]int{0: 0, 1: 0, 1 << 16: 0, 1<<16 + 1: 1, 1 << 17: 1, 17 << 16: 5, 64 << 20: 10, 64<<20 + 1: -1} {
		if got := classOf(n); got != want {
			t.Errorf("classOf(%d) = %d, want %d", n, got, want)
		}
	}
	var p memoryPool
	odd := make([]byte, 10, 100) // not a pooled capacity: dropped, never handed out
	odd[0] = 1
	p.put(odd)
	if b := p.get(10, 0); cap(b) == 100 {
		t.Fatal("a buffer of a foreign capacity came back from the pool")
	}
}
