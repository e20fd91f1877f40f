package abi

import "embed"

// Libraries holds the guest libraries of rust/, assemblyscript/ and c/ (their sources and
// native test hosts) and the types of TypeScript handlers (typescript/), which the
// pgflow-wasm binary carries so that `pgflow-wasm new` can copy them into a user's project
// without a registry. The Go library is its own module and carries itself (abi/go/source.go).
//
//go:embed rust/Cargo.toml rust/src/lib.rs assemblyscript/*.ts assemblyscript/testhost.mjs c/*.h typescript/*.d.ts
var Libraries embed.FS
