package sandbox

import (
	"fmt"
	"slices"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// hostFunc is one function the host offers to guests, written once for both engines.
// fn gets the guest's whole linear memory as a byte slice view (nil when needsMemory is
// false) and the arguments as raw 64-bit values (an i32 in the low 32 bits). A non-nil
// error is the *hostAbort already recorded in the state: the engine then unwinds the guest.
type hostFunc struct {
	module, name string
	sig          wasmfile.FuncType
	needsMemory  bool
	fn           func(s *callState, mem []byte, args []uint64) (uint64, error)
}

// hostFuncs lists every import a guest may use: the ABI's pgflow functions (capabilities
// included: what a step may do is decided per call, not at load) and WASI preview 1.
// Validation accepts exactly these names and signatures.
var hostFuncs = slices.Concat(pgflowFuncs(), capabilityFuncs(), wasiFuncs())

func hostFuncPtrs() []*hostFunc {
	out := make([]*hostFunc, len(hostFuncs))
	for i := range hostFuncs {
		out[i] = &hostFuncs[i]
	}
	return out
}

// hostFuncIndex finds a host function by module and name.
var hostFuncIndex = func() map[[2]string]*hostFunc {
	m := make(map[[2]string]*hostFunc, len(hostFuncs))
	for i := range hostFuncs {
		f := &hostFuncs[i]
		m[[2]string{f.module, f.name}] = f
	}
	return m
}()

func sig(params, results int, types ...wasmfile.ValType) wasmfile.FuncType {
	if len(types) != params+results {
		panic("sandbox: signature table is inconsistent")
	}
	return wasmfile.FuncType{Params: types[:params], Results: types[params:]}
}

func i32s(n int) []wasmfile.ValType {
	t := make([]wasmfile.ValType, n)
	for i := range t {
		t[i] = wasmfile.I32
	}
	return t
}

// span checks that [ptr, ptr+n) lies in mem, with ptr+n computed in 64 bits so a length
// that wraps past 2^32 cannot pass.
func span(mem []byte, ptr, n uint64) ([]byte, bool) {
	end := ptr + n
	if ptr > uint64(len(mem)) || n > uint64(len(mem)) || end > uint64(len(mem)) {
		return nil, false
	}
	return mem[ptr:end:end], true
}

// pgflowFuncs are the ABI v1 host imports without results (abi/SPEC.md).
func pgflowFuncs() []hostFunc {
	f := func(name string, fn func(s *callState, mem []byte, a []uint64) (uint64, error)) hostFunc {
		return hostFunc{module: abi.ImportModule, name: name, needsMemory: true,
			sig: wasmfile.FuncType{Params: i32s(abi.ImportParams[name])}, fn: fn}
	}
	return []hostFunc{
		f(abi.ImportInputRead, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			return 0, s.copyIn(mem, abi.ImportInputRead, a[0], s.input)
		}),
		f(abi.ImportContextRead, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			return 0, s.copyIn(mem, abi.ImportContextRead, a[0], s.context)
		}),
		f(abi.ImportOutputWrite, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			ptr, n := uint64(uint32(a[0])), uint64(uint32(a[1]))
			b, ok := span(mem, ptr, n)
			if !ok {
				return 0, s.badPointer(mem, abi.ImportOutputWrite, ptr, n)
			}
			if n > uint64(s.lim.maxOutput) {
				return 0, s.fail(&hostAbort{kind: KindOutputTooLarge, message: fmt.Sprintf(
					"output_write of %s is over the output cap of %s", bytesize.Text(n), bytesize.Text(uint64(s.lim.maxOutput)))})
			}
			s.output, s.hasOutput = append(s.output[:0], b...), true
			return 0, nil
		}),
		f(abi.ImportErrorWrite, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			ptr, n := uint64(uint32(a[0])), uint64(uint32(a[1]))
			b, ok := span(mem, ptr, n)
			if !ok {
				return 0, s.badPointer(mem, abi.ImportErrorWrite, ptr, n)
			}
			msg := cappedText{max: s.lim.maxError}
			msg.write(b)
			s.errMsg = msg.String()
			return 0, nil
		}),
		f(abi.ImportLog, func(s *callState, mem []byte, a []uint64) (uint64, error) {
			level, ptr, n := int32(uint32(a[0])), uint64(uint32(a[1])), uint64(uint32(a[2]))
			b, ok := span(mem, ptr, n)
			if !ok {
				return 0, s.badPointer(mem, abi.ImportLog, ptr, n)
			}
			if s.logBytes+len(b) > s.lim.maxLog {
				s.logsDropped++
				return 0, nil
			}
			s.logBytes += len(b)
			s.logs = append(s.logs, LogLine{Level: min(max(level, abi.LogDebug), abi.LogError), Message: validText(b)})
			return 0, nil
		}),
	}
}

func (s *callState) copyIn(mem []byte, name string, ptr uint64, data []byte) error {
	ptr = uint64(uint32(ptr))
	dst, ok := span(mem, ptr, uint64(len(data)))
	if !ok {
		return s.badPointer(mem, name, ptr, uint64(len(data)))
	}
	copy(dst, data)
	return nil
}

func (s *callState) badPointer(mem []byte, name string, ptr, n uint64) error {
	return s.protocolError("%s: %d bytes at address %d are outside the guest memory (%d bytes)",
		name, n, ptr, len(mem))
}
