// Package pgflow is the pgflow-wasm guest ABI, version 1 (see abi/SPEC.md), for Go.
//
// A handler is one function from the step input and the context (JSON bytes) to the output
// JSON or an error. Register it from init; the package exports pgflow_handle and
// pgflow_abi_version for it:
//
//	package main
//
//	import pgflow "github.com/pgflow-wasm/pgflow-wasm/abi/go"
//
//	func hello(input, context []byte) ([]byte, error) {
//		pgflow.Log(pgflow.Info, "saying hello")
//		return []byte(`{"hello":"world"}`), nil
//	}
//
//	func init() { pgflow.Handle(hello) }
//
//	func main() {}
//
// It builds as a WASI reactor with standard Go and with TinyGo:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o hello.wasm .
//	tinygo build -target=wasip1 -buildmode=c-shared -scheduler=none -no-debug -o hello.wasm .
//
// A panic writes its message with error_write, then goes on panicking: the task fails with
// the message and the instance is discarded. TinyGo cannot recover on WebAssembly: it
// prints "panic: ..." to stdout and traps, and the host appends that stdout to the task's
// error message.
package pgflow

// ABIVersion is the ABI version the module speaks.
const ABIVersion = 1

// Handler computes a task's output JSON from its input and context JSON. A non-nil error
// fails the task with err.Error() as the message.
type Handler func(input, context []byte) ([]byte, error)

// Level is the level of a log line.
type Level int32

// Log levels, as in the ABI.
const (
	Debug Level = 0
	Info  Level = 1
	Warn  Level = 2
	Error Level = 3
)

// Status codes pgflow_handle returns.
const (
	statusOK           = 0
	statusHandlerError = 1
)

var handler Handler

// Handle registers the module's handler. Call it once, from init.
func Handle(h Handler) { handler = h }

// run is the body of pgflow_handle with the host calls passed in, so it reads the same in
// every build; setError is also how a panic's message reaches the host.
func run(input, context []byte, setOutput func([]byte), setError func(string)) int32 {
	if handler == nil {
		setError("pgflow: no handler registered: call pgflow.Handle from init")
		return statusHandlerError
	}
	defer func() {
		if r := recover(); r != nil {
			setError("panic: " + panicMessage(r))
			panic(r)
		}
	}()
	out, err := handler(input, context)
	if err != nil {
		setError(err.Error())
		return statusHandlerError
	}
	setOutput(out)
	return statusOK
}

// panicMessage describes a recovered value without fmt (which TinyGo modules would carry
// only for this).
func panicMessage(r any) string {
	switch v := r.(type) {
	case error:
		return v.Error()
	case string:
		return v
	case interface{ String() string }:
		return v.String()
	default:
		return "(a value that is neither a string nor an error)"
	}
}
