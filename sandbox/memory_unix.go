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
