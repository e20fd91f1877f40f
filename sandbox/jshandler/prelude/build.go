//go:build ignore

// build.go bundles the prelude (prelude.js, its modules and the npm packages of
// package.json, installed by `npm ci` beside it) into one script for the engine:
//
//	go run ./sandbox/jshandler/prelude/build.go OUT
//
// mk/jsengine.mk runs it; OUT (engine/wasm/prelude.js) is generated, never committed. The
// script's value is install(natives), as pgflow_js.c expects: esbuild's IIFE is wrapped in
// a function, so the module's name is not a global.
package main

import (
	"path/filepath"
	"runtime"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler/internal/scriptbuild"
)

// lazyTR46 gives whatwg-url tr46.js in place of tr46, which loads the real one only for a
// host name that needs it (see tr46.js).
func lazyTR46(dir string) api.Plugin {
	return api.Plugin{Name: "lazy-tr46", Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: `^tr46$`}, func(args api.OnResolveArgs) (api.OnResolveResult, error) {
			return api.OnResolveResult{Path: filepath.Join(dir, "tr46.js")}, nil
		})
	}}
}

func main() {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Dir(self)
	scriptbuild.Main("prelude", dir, api.BuildOptions{
		EntryPoints: []string{filepath.Join(dir, "prelude.js")},
		GlobalName:  "pgflowPrelude",
		Banner:      map[string]string{"js": "(function () {"},
		Footer:      map[string]string{"js": "return pgflowPrelude.install;\n})()"},
		Outfile:     "prelude.js",
		Plugins:     []api.Plugin{lazyTR46(dir)},
	})
}
