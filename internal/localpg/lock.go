package localpg

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lock takes an exclusive flock on Dir/lock, so parallel test processes starting the same
// cluster do it once; it is released when the returned function runs (or the process dies).
func (c *Cluster) lock() (func(), error) {
	p := filepath.Join(c.Dir, "lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening cluster lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", p, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
