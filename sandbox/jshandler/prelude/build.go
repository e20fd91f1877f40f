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
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/evanw/esbuild/pkg/api"
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
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run build.go OUT")
		os.Exit(2)
	}
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		fmt.Fprintf(os.Stderr, "prelude: %s/node_modules is missing: run `npm ci` there (make jsengine does)\n", dir)
		os.Exit(1)
	}
	r := api.Build(api.BuildOptions{
		EntryPoints:   []string{filepath.Join(dir, "prelude.js")},
		AbsWorkingDir: dir,
		Bundle:        true,
		Write:         false,
		Format:        api.FormatIIFE,
		GlobalName:    "pgflowPrelude",
		Banner:        map[string]string{"js": "(function () {"},
		Footer:        map[string]string{"js": "return pgflowPrelude.install;\n})()"},
		Platform:      api.PlatformNeutral,
		MainFields:    []string{"module", "main"},
		Conditions:    []string{"worker", "import", "default"},
		Target:        api.ES2023,
		Define:        map[string]string{"process.env.NODE_ENV": `"production"`},
		Charset:       api.CharsetUTF8,
		// Comments and blanks go (the text is parsed once, into the snapshot); names and
		// lines stay, so a stack through the prelude can be read.
		MinifyWhitespace:  true,
		MinifySyntax:      true,
		MinifyIdentifiers: true,
		LegalComments:     api.LegalCommentsNone,
		LogLevel:          api.LogLevelSilent,
		Outfile:           "prelude.js",
		Plugins:           []api.Plugin{lazyTR46(dir)},
	})
	for _, m := range r.Errors {
		loc := ""
		if m.Location != nil {
			loc = fmt.Sprintf("%s:%d:%d: ", m.Location.File, m.Location.Line, m.Location.Column)
		}
		fmt.Fprintf(os.Stderr, "prelude: %s%s\n", loc, m.Text)
	}
	if len(r.Errors) > 0 || len(r.OutputFiles) != 1 {
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], r.OutputFiles[0].Contents, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "prelude:", err)
		os.Exit(1)
	}
}
