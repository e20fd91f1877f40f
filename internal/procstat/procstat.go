// Package procstat reads what Linux's /proc says about a process: CPU time (its own, its
// reaped children's, a PostgreSQL server's with all its backends) and resident memory.
// The benchmark and the tests that bound memory share it.
package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of /proc/<pid>/stat CPU times (USER_HZ, 100 on Linux).
const ClockTick = 10 * time.Millisecond

// Times reads a process's CPU time from /proc/<pid>/stat: its own user+system time,
// and separately that of its reaped children.
func Times(pid int) (self, children time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	n := func(k int) time.Duration {
		v, _ := strconv.ParseInt(f[k-3], 10, 64)
		return time.Duration(v) * ClockTick
	}
	return n(14) + n(15), n(16) + n(17), nil
}

func ppidOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	v, _ := strconv.Atoi(f[1])
	return v
}

// CPU is a process's CPU time including children it has reaped.
func CPU(pid int) (time.Duration, error) {
	self, children, err := Times(pid)
	return self + children, err
}

// ServerCPU is the CPU time of a PostgreSQL server: the postmaster, its live children
// (backends, background workers) and the children it has reaped (backends that exited).
func ServerCPU(postmaster int) (time.Duration, error) {
	total, err := CPU(postmaster)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || ppidOf(pid) != postmaster {
			continue
		}
		if self, _, err := Times(pid); err == nil {
			total += self
		}
	}
	return total, nil
}

// PostmasterPID reads the server's pid from its data folder.
func PostmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// PeakRSS is a process's high-water resident set size (VmHWM), in bytes.
func PeakRSS(pid int) (int64, error) {
	return statusField(pid, "VmHWM:")
}

// RSS is a process's resident set size now (VmRSS), in bytes.
func RSS(pid int) (int64, error) {
	return statusField(pid, "VmRSS:")
}

func statusField(pid int, name string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name) {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, err := strconv.ParseInt(f[1], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", name, pid)
}
