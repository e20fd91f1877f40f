//go:build !wasmtime

package sandbox

import "errors"

const wasmtimeAvailable = false

func newWasmtime(Config) (backend, error) {
	return nil, errors.New(`sandbox: engine "wasmtime" is not in this binary: build it with -tags wasmtime (cgo)`)
}
