package sandbox

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// WASI preview 1 with everything denied, implemented once for both engines so a guest
// sees the same world on wazero and wasmtime: no arguments, no environment, no files (no
// preopened directories, so every path call fails with EBADF), no sockets, the host's clocks
// (realtime is the wall clock, monotonic counts from the worker's start, sleeps wait) or, for
// a deterministic step (Task.FixedClock), fake clocks that start at 2022-01-01T00:00:00Z and
// advance 1 ms per reading (sleeps return at once and advance the clock), and random bytes
// that are unpredictable, or reproducible per task when the step asks for it (Task.Seed). File descriptors 0, 1 and 2 are
// the only ones: stdin holds the command-mode envelope (empty for reactors), stdout is the
// command-mode output, and stderr and the start of stdout are kept up to MaxErrorBytes each
// for the message of a failed call.

// WASI errno values used here.
const (
	errnoSuccess  = 0
	errnoBadf     = 8
	errnoFault    = 21
	errnoInval    = 28
	errnoNosys    = 52
	errnoNotsock  = 57
	errnoNotsup   = 58
	errnoSpipe    = 70
	errnoNotdir   = 54
	fakeEpochNano = 1640995200 * 1e9 // 2022-01-01T00:00:00Z, like wazero's fake walltime
	fakeTickNanos = 1e6              // each clock reading advances the fake clock by 1 ms
)

// seedDomain separates random_get's seeds from any other use of a task's identity.
const seedDomain = "pgflow-wasm random_get v1\x00"

func wasiFuncs() []hostFunc {
	const (
		i32 = wasmfile.I32
		i64 = wasmfile.I64
	)
	type fn = func(s *callState, mem []byte, a []uint64) (uint64, error)
	w := func(name string, t wasmfile.FuncType, f fn) hostFunc {
		return hostFunc{module: abi.WASIModule, name: name, sig: t, needsMemory: true, fn: f}
	}
	// errno returns a constant error for calls that need neither memory nor state.
	errno := func(name string, t wasmfile.FuncType, e uint64) hostFunc {
		return hostFunc{module: abi.WASIModule, name: name, sig: t,
			fn: func(*callState, []byte, []uint64) (uint64, error) { return e, nil }}
	}
	// fdOp answers calls on a descriptor that are meaningless for stdio: EBADF for
	// unknown descriptors, onStdio for 0-2.
	fdOp := func(name string, t wasmfile.FuncType, onStdio uint64) hostFunc {
		return hostFunc{module: abi.WASIModule, name: name, sig: t,
			fn: func(s *callState, _ []byte, a []uint64) (uint64, error) {
				if !s.isStdio(a[0]) {
					return errnoBadf, nil
				}
				return onStdio, nil
			}}
	}
	return []hostFunc{
		w("args_get", sig(2, 1, i32, i32, i32), zeroCount),
		w("args_sizes_get", sig(2, 1, i32, i32, i32), twoZeros),
		w("environ_get", sig(2, 1, i32, i32, i32), zeroCount),
		w("environ_sizes_get", sig(2, 1, i32, i32, i32), twoZeros),
		w("clock_res_get", sig(2, 1, i32, i32, i32), clockResGet),
		w("clock_time_get", sig(3, 1, i32, i64, i32, i32), clockTimeGet),
		fdOp("fd_advise", sig(4, 1, i32, i64, i64, i32, i32), errnoSpipe),
		fdOp("fd_allocate", sig(3, 1, i32, i64, i64, i32), errnoNotsup),
		{module: abi.WASIModule, name: "fd_close", sig: sig(1, 1, i32, i32), fn: fdClose},
		fdOp("fd_datasync", sig(1, 1, i32, i32), errnoInval),
		w("fd_fdstat_get", sig(2, 1, i32, i32, i32), fdFdstatGet),
		fdOp("fd_fdstat_set_flags", sig(2, 1, i32, i32, i32), errnoNotsup),
		fdOp("fd_fdstat_set_rights", sig(3, 1, i32, i64, i64, i32), errnoNotsup),
		w("fd_filestat_get", sig(2, 1, i32, i32, i32), fdFilestatGet),
		fdOp("fd_filestat_set_size", sig(2, 1, i32, i64, i32), errnoInval),
		fdOp("fd_filestat_set_times", sig(4, 1, i32, i64, i64, i32, i32), errnoNotsup),
		fdOp("fd_pread", sig(5, 1, i32, i32, i32, i64, i32, i32), errnoSpipe),
		errno("fd_prestat_get", sig(2, 1, i32, i32, i32), errnoBadf),
		errno("fd_prestat_dir_name", sig(3, 1, i32, i32, i32, i32), errnoBadf),
		fdOp("fd_pwrite", sig(5, 1, i32, i32, i32, i64, i32, i32), errnoSpipe),
		w("fd_read", sig(4, 1, i32, i32, i32, i32, i32), fdRead),
		fdOp("fd_readdir", sig(5, 1, i32, i32, i32, i64, i32, i32), errnoNotdir),
		fdOp("fd_renumber", sig(2, 1, i32, i32, i32), errnoNotsup),
		fdOp("fd_seek", sig(4, 1, i32, i64, i32, i32, i32), errnoSpipe),
		fdOp("fd_sync", sig(1, 1, i32, i32), errnoInval),
		fdOp("fd_tell", sig(2, 1, i32, i32, i32), errnoSpipe),
		w("fd_write", sig(4, 1, i32, i32, i32, i32, i32), fdWrite),
		fdOp("path_create_directory", sig(3, 1, i32, i32, i32, i32), errnoNotdir),
		fdOp("path_filestat_get", sig(5, 1, i32, i32, i32, i32, i32, i32), errnoNotdir),
		fdOp("path_filestat_set_times", sig(7, 1, i32, i32, i32, i32, i64, i64, i32, i32), errnoNotdir),
		fdOp("path_link", sig(7, 1, i32, i32, i32, i32, i32, i32, i32, i32), errnoNotdir),
		fdOp("path_open", sig(9, 1, i32, i32, i32, i32, i32, i64, i64, i32, i32, i32), errnoNotdir),
		fdOp("path_readlink", sig(6, 1, i32, i32, i32, i32, i32, i32, i32), errnoNotdir),
		fdOp("path_remove_directory", sig(3, 1, i32, i32, i32, i32), errnoNotdir),
		fdOp("path_rename", sig(6, 1, i32, i32, i32, i32, i32, i32, i32), errnoNotdir),
		{module: abi.WASIModule, name: "path_symlink", sig: sig(5, 1, i32, i32, i32, i32, i32, i32),
			fn: func(s *callState, _ []byte, a []uint64) (uint64, error) {
				if !s.isStdio(a[2]) { // the directory descriptor is the third argument here
					return errnoBadf, nil
				}
				return errnoNotdir, nil
			}},
		fdOp("path_unlink_file", sig(3, 1, i32, i32, i32, i32), errnoNotdir),
		w("poll_oneoff", sig(4, 1, i32, i32, i32, i32, i32), pollOneoff),
		{module: abi.WASIModule, name: "proc_exit", sig: sig(1, 0, i32), fn: procExit},
		errno("proc_raise", sig(1, 1, i32, i32), errnoNosys),
		errno("sched_yield", sig(0, 1, i32), errnoSuccess),
		w("random_get", sig(2, 1, i32, i32, i32), randomGet),
		fdOp("sock_accept", sig(3, 1, i32, i32, i32, i32), errnoNotsock),
		fdOp("sock_recv", sig(6, 1, i32, i32, i32, i32, i32, i32, i32), errnoNotsock),
		fdOp("sock_send", sig(5, 1, i32, i32, i32, i32, i32, i32), errnoNotsock),
		fdOp("sock_shutdown", sig(2, 1, i32, i32, i32), errnoNotsock),
	}
}

func (s *callState) isStdio(fd uint64) bool {
	fd = uint64(uint32(fd))
	return fd < 3 && !s.closedFD[fd]
}

// put writes little-endian values at ptr after a bounds check; false means EFAULT.
func putU32(mem []byte, ptr uint64, v uint32) bool {
	b, ok := span(mem, uint64(uint32(ptr)), 4)
	if ok {
		binary.LittleEndian.PutUint32(b, v)
	}
	return ok
}

func putU64(mem []byte, ptr uint64, v uint64) bool {
	b, ok := span(mem, uint64(uint32(ptr)), 8)
	if ok {
		binary.LittleEndian.PutUint64(b, v)
	}
	return ok
}

func errnoIf(ok bool) uint64 {
	if ok {
		return errnoSuccess
	}
	return errnoFault
}

// zeroCount serves args_get and environ_get: there is nothing to write.
func zeroCount(*callState, []byte, []uint64) (uint64, error) { return errnoSuccess, nil }

// twoZeros serves args_sizes_get and environ_sizes_get: no entries, no bytes.
func twoZeros(_ *callState, mem []byte, a []uint64) (uint64, error) {
	return errnoIf(putU32(mem, a[0], 0) && putU32(mem, a[1], 0)), nil
}

func clockResGet(s *callState, mem []byte, a []uint64) (uint64, error) {
	if uint32(a[0]) > 3 {
		return errnoInval, nil
	}
	res := uint64(1) // Go's clocks read nanoseconds
	if s.fixedClock {
		res = fakeTickNanos
	}
	return errnoIf(putU64(mem, a[1], res)), nil
}

// monoStart is the origin of the guests' real monotonic clock: every instance counts from
// the worker's start, so a reading never goes back, within a task or across the tasks of a
// reused instance, and JavaScript's performance.now() (which subtracts a reading taken when
// its snapshot was made, on the fake clock) stays positive.
var monoStart = time.Now()

// now reads a clock. Realtime (0) is the wall clock; the monotonic and CPU-time clocks (1-3)
// are the time since the worker started (a guest's CPU time is not measured apart). With
// a fixed clock: realtime is the fake epoch plus the elapsed fake time, the others the
// elapsed fake time.
func (s *callState) now(id uint32) (uint64, bool) {
	if id > 3 {
		return 0, false
	}
	if !s.fixedClock {
		if id == 0 {
			return uint64(time.Now().UnixNano()), true
		}
		return uint64(time.Since(monoStart)), true
	}
	s.clockNanos += fakeTickNanos
	if id == 0 {
		return fakeEpochNano + s.clockNanos, true
	}
	return s.clockNanos, true
}

func clockTimeGet(s *callState, mem []byte, a []uint64) (uint64, error) {
	t, ok := s.now(uint32(a[0]))
	if !ok {
		return errnoInval, nil
	}
	return errnoIf(putU64(mem, a[2], t)), nil
}

func fdClose(s *callState, _ []byte, a []uint64) (uint64, error) {
	if !s.isStdio(a[0]) {
		return errnoBadf, nil
	}
	s.closedFD[uint32(a[0])] = true
	return errnoSuccess, nil
}

// Character-device stat for stdio: fdstat is 24 bytes (filetype u8 at 0, flags u16 at 2,
// rights u64 at 8 and 16), filestat 64 bytes (filetype u8 at 16, the rest zero).
const (
	filetypeCharDevice = 2
	rightFdRead        = 1 << 1
	rightFdWrite       = 1 << 6
	rightPollReadWrite = 1 << 27
)

func fdFdstatGet(s *callState, mem []byte, a []uint64) (uint64, error) {
	if !s.isStdio(a[0]) {
		return errnoBadf, nil
	}
	b, ok := span(mem, uint64(uint32(a[1])), 24)
	if !ok {
		return errnoFault, nil
	}
	clear(b)
	b[0] = filetypeCharDevice
	rights := uint64(rightFdWrite | rightPollReadWrite)
	if uint32(a[0]) == 0 {
		rights = rightFdRead | rightPollReadWrite
	}
	binary.LittleEndian.PutUint64(b[8:], rights)
	return errnoSuccess, nil
}

func fdFilestatGet(s *callState, mem []byte, a []uint64) (uint64, error) {
	if !s.isStdio(a[0]) {
		return errnoBadf, nil
	}
	b, ok := span(mem, uint64(uint32(a[1])), 64)
	if !ok {
		return errnoFault, nil
	}
	clear(b)
	b[16] = filetypeCharDevice
	return errnoSuccess, nil
}

// iovecs walks an array of (ptr u32, len u32) buffers, bounds-checking each one.
func iovecs(mem []byte, iovs, n uint64, each func([]byte) bool) bool {
	list, ok := span(mem, uint64(uint32(iovs)), uint64(uint32(n))*8)
	if !ok {
		return false
	}
	for i := 0; i < len(list); i += 8 {
		buf, ok := span(mem, uint64(binary.LittleEndian.Uint32(list[i:])), uint64(binary.LittleEndian.Uint32(list[i+4:])))
		if !ok {
			return false
		}
		if !each(buf) {
			break
		}
	}
	return true
}

func fdRead(s *callState, mem []byte, a []uint64) (uint64, error) {
	fd := uint32(a[0])
	if !s.isStdio(a[0]) || fd != 0 {
		return errnoBadf, nil
	}
	total := 0
	ok := iovecs(mem, a[1], a[2], func(buf []byte) bool {
		n := copy(buf, s.stdin[s.stdinPos:])
		s.stdinPos += n
		total += n
		return n == len(buf)
	})
	if !ok {
		return errnoFault, nil
	}
	return errnoIf(putU32(mem, a[3], uint32(total))), nil
}

func fdWrite(s *callState, mem []byte, a []uint64) (uint64, error) {
	fd := uint32(a[0])
	if !s.isStdio(a[0]) || fd == 0 {
		return errnoBadf, nil
	}
	total := uint64(0)
	var abort error
	ok := iovecs(mem, a[1], a[2], func(buf []byte) bool {
		total += uint64(len(buf))
		if fd == 2 {
			s.stderr.write(buf)
			return true
		}
		// TinyGo prints its panics to stdout, then traps: keep the start of stdout for the
		// message of a failed call. This copy never reaches a successful result.
		s.stdoutCopy.write(buf)
		if s.command {
			if len(s.stdout)+len(buf) > s.lim.maxOutput {
				abort = s.fail(&hostAbort{kind: KindOutputTooLarge, message: fmt.Sprintf(
					"stdout of the command is over the output cap of %s", bytesize.Text(uint64(s.lim.maxOutput)))})
				return false
			}
			s.stdout = append(s.stdout, buf...)
		}
		return true
	})
	if abort != nil {
		return 0, abort
	}
	if !ok {
		return errnoFault, nil
	}
	return errnoIf(putU32(mem, a[3], uint32(total))), nil
}

// poll_oneoff: stdin is always readable, stdout and stderr always writable; any other
// descriptor gets an EBADF event. Clock subscriptions wait on the real clock (pollReal), or,
// with a fixed clock, fire at once and move the fake clock to their deadline.
// Subscriptions are 48 bytes, events 32.
func pollOneoff(s *callState, mem []byte, a []uint64) (uint64, error) {
	n := uint64(uint32(a[2]))
	if n == 0 {
		return errnoInval, nil
	}
	in, ok1 := span(mem, uint64(uint32(a[0])), n*48)
	out, ok2 := span(mem, uint64(uint32(a[1])), n*32)
	if !ok1 || !ok2 {
		return errnoFault, nil
	}
	if !s.fixedClock {
		return s.pollReal(mem, in, out, n, a[3])
	}
	le := binary.LittleEndian
	var advance uint64
	for i := uint64(0); i < n; i++ {
		sub, ev := in[i*48:(i+1)*48], out[i*32:(i+1)*32]
		tag := sub[8]
		clear(ev)
		copy(ev[0:8], sub[0:8]) // userdata
		ev[10] = tag
		switch tag {
		case 0: // clock
			clockID, timeout, flags := le.Uint32(sub[16:]), le.Uint64(sub[24:]), le.Uint16(sub[40:])
			if clockID > 3 {
				le.PutUint16(ev[8:], errnoInval)
				continue
			}
			d := timeout
			if flags&1 != 0 { // absolute deadline
				base := s.clockNanos
				if clockID == 0 {
					base += fakeEpochNano
				}
				d = 0
				if timeout > base {
					d = timeout - base
				}
			}
			advance = max(advance, d)
		default:
			pollFD(s, sub, ev)
		}
	}
	s.clockNanos += advance
	return errnoIf(putU32(mem, a[3], uint32(n))), nil
}

// pollFD fills the event of a descriptor subscription (or an unknown one): all are ready.
func pollFD(s *callState, sub, ev []byte) {
	le := binary.LittleEndian
	tag := sub[8]
	switch tag {
	case 1, 2: // fd_read, fd_write
		fd := le.Uint32(sub[16:])
		if !s.isStdio(uint64(fd)) || (tag == 1) != (fd == 0) {
			le.PutUint16(ev[8:], errnoBadf)
			return
		}
		if tag == 1 {
			le.PutUint64(ev[16:], uint64(len(s.stdin)-s.stdinPos))
		}
	default:
		le.PutUint16(ev[8:], errnoInval)
	}
}

// pollReal is poll_oneoff on the real clock, as poll(2) does it: descriptor events (always
// ready) and clocks already due are reported at once; otherwise it sleeps until the first
// clock deadline, or until the task's deadline, which stops the guest.
func (s *callState) pollReal(mem, in, out []byte, n, nevents uint64) (uint64, error) {
	le := binary.LittleEndian
	wait := make([]time.Duration, n) // per subscription: how long until it is due; -1 ready now
	first := time.Duration(-1)
	anyReady := false
	for i := uint64(0); i < n; i++ {
		sub := in[i*48 : (i+1)*48]
		wait[i] = -1
		if sub[8] != 0 {
			anyReady = true
			continue
		}
		clockID, timeout, flags := le.Uint32(sub[16:]), le.Uint64(sub[24:]), le.Uint16(sub[40:])
		if clockID > 3 {
			anyReady = true
			continue
		}
		d := time.Duration(min(timeout, uint64(1<<63-1)))
		if flags&1 != 0 { // absolute deadline on that clock
			now, _ := s.now(clockID)
			d = 0
			if timeout > now {
				d = time.Duration(min(timeout-now, uint64(1<<63-1)))
			}
		}
		if d <= 0 {
			anyReady = true
			continue
		}
		wait[i] = d
		if first < 0 || d < first {
			first = d
		}
	}
	if !anyReady && first > 0 {
		ctx := s.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		t := time.NewTimer(first)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.Canceled) {
				return 0, s.fail(&hostAbort{kind: KindCanceled, message: "the call was canceled while the guest slept"})
			}
			return 0, s.fail(&hostAbort{kind: KindTimeout, message: timeoutMessage(s.timeout) + " while the guest slept"})
		}
		for i := range wait {
			if wait[i] > 0 && wait[i] <= first {
				wait[i] = -1
			}
		}
	}
	k := uint64(0)
	for i := uint64(0); i < n; i++ {
		if wait[i] >= 0 {
			continue
		}
		sub, ev := in[i*48:(i+1)*48], out[k*32:(k+1)*32]
		k++
		clear(ev)
		copy(ev[0:8], sub[0:8]) // userdata
		ev[10] = sub[8]
		if sub[8] == 0 {
			if le.Uint32(sub[16:]) > 3 {
				le.PutUint16(ev[8:], errnoInval)
			}
			continue
		}
		pollFD(s, sub, ev)
	}
	return errnoIf(putU32(mem, nevents, uint32(k))), nil
}

func procExit(s *callState, _ []byte, a []uint64) (uint64, error) {
	code := uint32(a[0])
	return 0, s.fail(&hostAbort{kind: KindTrap, exit: true, exitCode: code,
		message: fmt.Sprintf("the guest called proc_exit(%d)", code)})
}

func randomGet(s *callState, mem []byte, a []uint64) (uint64, error) {
	b, ok := span(mem, uint64(uint32(a[0])), uint64(uint32(a[1])))
	if !ok {
		return errnoFault, nil
	}
	if s.rng == nil {
		s.rng = rand.NewChaCha8(taskSeed(s.seed))
	}
	_, _ = s.rng.Read(b)
	return errnoSuccess, nil
}

// taskSeed is the ChaCha8 key of a task's random stream: derived from the task's seed
// (the same task draws the same bytes), or from the operating system's random source when
// the task has none, so no two tasks share a stream.
func taskSeed(seed []byte) [32]byte {
	if seed != nil {
		return sha256.Sum256(append([]byte(seedDomain), seed...))
	}
	var k [32]byte
	_, _ = crand.Read(k[:]) // never fails on supported platforms (crypto/rand panics instead)
	return k
}
