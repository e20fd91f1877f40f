//go:build ignore

// build.go bundles entry.js with the @supabase/supabase-js that package-lock.json pins
// (installed by `npm ci` beside it) into one script for the engine:
//
//	go run ./sandbox/jshandler/supabasejs/build.go OUT
//
// mk/jsengine.mk runs it; OUT (engine/wasm/supabase.js) is generated, never committed. It is
// not part of the prelude: only the snapshots of steps granted Supabase carry it.
package main

import (
	"path/filepath"
	"runtime"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler/internal/scriptbuild"
)

func main() {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Dir(self)
	scriptbuild.Main("supabasejs", dir, api.BuildOptions{
		EntryPoints: []string{filepath.Join(dir, "entry.js")},
		Outfile:     "supabase.js",
	})
}
