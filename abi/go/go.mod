// The Go guest library is its own module: it builds for GOOS=wasip1 with standard Go and
// with TinyGo (which accepts Go up to 1.25), independently of the worker's go.mod.
module github.com/pgflow-wasm/pgflow-wasm/abi/go

go 1.24
