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
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/evanw/esbuild/pkg/api"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run build.go OUT")
		os.Exit(2)
	}
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		fmt.Fprintf(os.Stderr, "supabasejs: %s/node_modules is missing: run `npm ci` there (make jsengine does)\n", dir)
		os.Exit(1)
	}
	r := api.Build(api.BuildOptions{
		EntryPoints:   []string{filepath.Join(dir, "entry.js")},
		AbsWorkingDir: dir,
		Bundle:        true,
		Write:         false,
		Format:        api.FormatIIFE,
		Platform:      api.PlatformNeutral,
		MainFields:    []string{"module", "main"},
		Conditions:    []string{"worker", "import", "default"},
		Target:        api.ES2023,
		Define:        map[string]string{"process.env.NODE_ENV": `"production"`},
		Charset:       api.CharsetUTF8,
		// The handler's bundle keeps its text in the snapshot (for Function.prototype.toString),
		// and this script is appended to it: the smaller the better.
		MinifyWhitespace:  true,
		MinifySyntax:      true,
		MinifyIdentifiers: true,
		LegalComments:     api.LegalCommentsNone,
		LogLevel:          api.LogLevelSilent,
		Outfile:           "supabase.js",
	})
	for _, m := range r.Errors {
		loc := ""
		if m.Location != nil {
			loc = fmt.Sprintf("%s:%d:%d: ", m.Location.File, m.Location.Line, m.Location.Column)
		}
		fmt.Fprintf(os.Stderr, "supabasejs: %s%s\n", loc, m.Text)
	}
	if len(r.Errors) > 0 || len(r.OutputFiles) != 1 {
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], r.OutputFiles[0].Contents, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "supabasejs:", err)
		os.Exit(1)
	}
}
