// Standard Go reactor (GOOS=wasip1, -buildmode=c-shared) whose handler panics: the Go
// runtime prints the panic to stderr and exits with code 2.
package main

//go:wasmexport pgflow_abi_version
func abiVersion() int32 { return 1 }

//go:wasmexport pgflow_handle
func handle(inputLen, contextLen int32) int32 {
	panic("boom from Go")
}

func main() {}
