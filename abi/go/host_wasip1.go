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

//go:wasmimport pgflow http_request
func httpRequest(method unsafe.Pointer, methodLen uint32, url unsafe.Pointer, urlLen uint32,
	header unsafe.Pointer, headerLen uint32, body unsafe.Pointer, bodyLen uint32) int32

//go:wasmimport pgflow http_response_read
func httpResponseRead(part int32, ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport pgflow config_get
func configGet(name unsafe.Pointer, nameLen uint32, ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport pgflow last_error
func lastError(ptr unsafe.Pointer, capacity uint32) int32

func hostHTTPRequest(method, url, header string, body []byte) int32 {
	return httpRequest(unsafe.Pointer(unsafe.StringData(method)), uint32(len(method)),
		unsafe.Pointer(unsafe.StringData(url)), uint32(len(url)),
		unsafe.Pointer(unsafe.StringData(header)), uint32(len(header)),
		unsafe.Pointer(unsafe.SliceData(body)), uint32(len(body)))
}

// hostResponsePart pulls part 0 (headers) or 1 (body) of the last response: the length
// first, then the bytes into a buffer of that size.
func hostResponsePart(part int32) []byte {
	b := buffer(httpResponseRead(part, nil, 0))
	if len(b) > 0 {
		httpResponseRead(part, unsafe.Pointer(&b[0]), uint32(len(b)))
	}
	return b
}

func hostConfigGet(name string) ([]byte, int32) {
	ptr, n := unsafe.Pointer(unsafe.StringData(name)), uint32(len(name))
	size := configGet(ptr, n, nil, 0)
	if size < 0 {
		return nil, size
	}
	b := buffer(size)
	if len(b) > 0 {
		configGet(ptr, n, unsafe.Pointer(&b[0]), uint32(len(b)))
	}
	return b, 0
}

func hostLastError() string {
	b := buffer(lastError(nil, 0))
	if len(b) > 0 {
		lastError(unsafe.Pointer(&b[0]), uint32(len(b)))
	}
	return string(b)
}

//go:wasmimport pgflow sql_query
func sqlQuery(req unsafe.Pointer, reqLen uint32) int32

//go:wasmimport pgflow sql_result_read
func sqlResultRead(ptr unsafe.Pointer, capacity uint32) int32

func hostSQLQuery(request string) int32 {
	return sqlQuery(unsafe.Pointer(unsafe.StringData(request)), uint32(len(request)))
}

// hostSQLResult pulls the n bytes of the last result.
func hostSQLResult(n int32) []byte {
	b := buffer(n)
	if len(b) > 0 {
		sqlResultRead(unsafe.Pointer(&b[0]), uint32(len(b)))
	}
	return b
}
