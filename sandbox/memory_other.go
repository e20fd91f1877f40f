//go:build !linux

package sandbox

// Elsewhere large linear memories come from the Go heap (see mempool.go).
func mapMemory(uint64) ([]byte, bool) { return nil, false }

func unmapMemory([]byte) {}

func mapPages(uint64) ([]byte, bool) { return nil, false }

func clearTouched(b []byte, o *overwritten) { clearExcept(b, o) }
