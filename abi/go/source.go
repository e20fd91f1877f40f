//go:build !wasip1

package pgflow

import "embed"

// Source is this library's own source, which the pgflow-wasm binary carries so that
// `pgflow-wasm new` can copy it into a user's project (no registry needed). Handler
// modules never include it: it is not built for wasip1.
//
//go:embed *.go go.mod
var Source embed.FS
