// Package engine carries the JavaScript engine in the binary: `make` builds QuickJS-NG and
// the ABI glue in c/ into wasm/engine.wasm and bundles the prelude into wasm/prelude.js
// (mk/jsengine.mk), and both are embedded here. The files are generated, never committed: a binary built with a plain `go build` has none, and
// says so.
package engine

import (
	"embed"
	"errors"
	"strings"
)

//go:embed wasm
var files embed.FS

// ErrMissing says how to get an engine into the binary.
var ErrMissing = errors.New("TypeScript and JavaScript handlers need the JavaScript engine, " +
	"which this binary was built without: build it with `make build` (mk/jsengine.mk builds QuickJS-NG), not a plain `go build`")

// Wasm returns the engine module and what it was built from (its VERSION file).
func Wasm() (wasm []byte, version string, err error) {
	wasm, err = files.ReadFile("wasm/engine.wasm")
	if err != nil || len(wasm) == 0 {
		return nil, "", ErrMissing
	}
	v, _ := files.ReadFile("wasm/VERSION")
	return wasm, strings.TrimSpace(string(v)), nil
}

// Prelude returns the script the engine evaluates before every handler: prelude/prelude.js
// and the npm packages it uses, bundled at build time (mk/jsengine.mk).
func Prelude() ([]byte, error) {
	p, err := files.ReadFile("wasm/prelude.js")
	if err != nil || len(p) == 0 {
		return nil, ErrMissing
	}
	return p, nil
}

// Supabase returns the script that gives ctx.supabase its client: the @supabase/supabase-js of
// sandbox/jshandler/supabasejs, bundled at build time (mk/jsengine.mk). Only the snapshots of
// steps granted Supabase carry it; ErrMissing when the binary was built without it.
func Supabase() ([]byte, error) {
	p, err := files.ReadFile("wasm/supabase.js")
	if err != nil || len(p) == 0 {
		return nil, ErrMissing
	}
	return p, nil
}
