//go:build linux

package sandbox

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

const hugePage = 2 << 20

// mapMemory reserves n bytes of zeroed memory outside the Go heap. MAP_NORESERVE: the
// pages cost nothing until the guest touches them. The mapping is aligned to 2 MiB and
// asks for transparent huge pages: on a virtual machine every 4 KiB page fault can be an
// exit to the hypervisor (measured here: 64 MiB written page by page took 0.4-0.7 s in
// 4 KiB pages, 7-20 ms in huge pages; docs/sandbox.md, "Memory").
//
// The pointer calls (MmapPtr, MunmapPtr) keep the mapping out of package syscall's
// registry, which only unmaps exactly what it mapped.
func mapMemory(n uint64) ([]byte, bool) {
	size := uintptr(n) + hugePage
	p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil, false
	}
	// Trim to a 2 MiB-aligned start and exactly n bytes.
	skip := (hugePage - uintptr(p)%hugePage) % hugePage
	if skip > 0 {
		_ = unix.MunmapPtr(p, skip)
	}
	start := unsafe.Add(p, skip)
	if tail := size - skip - uintptr(n); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(start, n), tail)
	}
	b := unsafe.Slice((*byte)(start), n)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // only a wish: without it the memory works the same
	return b, true
}

// unmapMemory gives a mapping of mapMemory back to the operating system.
func unmapMemory(b []byte) {
	b = b[:cap(b)]
	_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
}

// mapPages maps n bytes of zeroed memory outside the Go heap for the pool (mempool.go), in
// ordinary pages: a pooled buffer keeps the pages its guests touched, and a huge page would
// make a guest that touches a byte of it hold 2 MiB.
func mapPages(n uint64) ([]byte, bool) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, false
	}
	return unsafe.Slice((*byte)(p), n), true
}

// clearTouched zeroes b, a mapping of mapPages, but for o's ranges (o nil: all of it),
// writing only the pages that are resident and dropping the rest (MADV_DONTNEED: they read
// as zero again, even one that was swapped out). A JavaScript engine's instance touches the
// top of its 1 MiB stack and its heap, not the rest: clearing only what was touched keeps
// the rest from becoming resident.
func clearTouched(b []byte, o *overwritten) {
	const page = 4096
	if len(b) == 0 {
		return
	}
	n := (len(b) + page - 1) / page
	vec := make([]byte, n)
	base := unsafe.SliceData(b)
	// golang.org/x/sys/unix has no Mincore on Linux.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(base)), uintptr(n*page),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); errno != 0 {
		clearExcept(b, o)
		return
	}
	for i := 0; i < n; {
		resident := vec[i]&1 != 0
		j := i + 1
		for j < n && (vec[j]&1 != 0) == resident {
			j++
		}
		run := b[:cap(b)][i*page : j*page]
		if resident || unix.Madvise(run, unix.MADV_DONTNEED) != nil {
			clearRange(b, uint64(i*page), uint64(min(j*page, len(b))), o)
		}
		i = j
	}
}

// clearRange zeroes b[from:to] but for o's ranges.
func clearRange(b []byte, from, to uint64, o *overwritten) {
	if o != nil {
		for _, r := range o.ranges {
			if r[1] <= from {
				continue
			}
			if r[0] >= to {
				break
			}
			if r[0] > from {
				clear(b[from:r[0]])
			}
			from = r[1]
			if from >= to {
				return
			}
		}
	}
	if from < to {
		clear(b[from:to])
	}
}
