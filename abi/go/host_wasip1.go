//go:build wasip1

package pgflow

import "unsafe"

//go:wasmimport pgflow input_read
func inputRead(ptr unsafe.Pointer)

//go:wasmimport pgflow context_read
func contextRead(ptr unsafe.Pointer)

//go:wasmimport pgflow output_write
func outputWrite(ptr unsafe.Pointer, n uint32)

//go:wasmimport pgflow error_write
func errorWrite(ptr unsafe.Pointer, n uint32)

//go:wasmimport pgflow log
func hostLog(level int32, ptr unsafe.Pointer, n uint32)

//go:wasmexport pgflow_abi_version
func abiVersion() int32 { return ABIVersion }

//go:wasmexport pgflow_handle
func handle(inputLen, contextLen int32) int32 {
	input, context := buffer(inputLen), buffer(contextLen)
	if len(input) > 0 {
		inputRead(unsafe.Pointer(&input[0]))
	}
	if len(context) > 0 {
		contextRead(unsafe.Pointer(&context[0]))
	}
	return run(input, context, setOutput, setError)
}

// Log writes one log line for the current task.
func Log(level Level, message string) {
	hostLog(int32(level), unsafe.Pointer(unsafe.StringData(message)), uint32(len(message)))
}

// buffer makes room for n bytes the host copies in. (TinyGo cannot pass an imported
// function as a value, so the reads stay in handle.)
func buffer(n int32) []byte {
	if n <= 0 {
		return nil
	}
	return make([]byte, n)
}

func setOutput(json []byte) {
	outputWrite(unsafe.Pointer(unsafe.SliceData(json)), uint32(len(json)))
}

func setError(message string) {
	errorWrite(unsafe.Pointer(unsafe.StringData(message)), uint32(len(message)))
}
