// Go example handlers. One source tree builds with standard Go (modules/examples/go/*.wasm)
// and with TinyGo (modules/examples/tinygo/*.wasm); see README.md.
module github.com/pgflow-wasm/pgflow-wasm/modules/examples/go

go 1.24

require github.com/pgflow-wasm/pgflow-wasm/abi/go v0.0.0

replace github.com/pgflow-wasm/pgflow-wasm/abi/go => ../../../abi/go
