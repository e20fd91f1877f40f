// Standard Go reactor that keeps allocating until the Go runtime runs out of memory
// ("fatal error: out of memory", exit code 2).
package main

var hog [][]byte

//go:wasmexport pgflow_abi_version
func abiVersion() int32 { return 1 }

//go:wasmexport pgflow_handle
func handle(inputLen, contextLen int32) int32 {
	for {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		hog = append(hog, b)
	}
}

func main() {}
