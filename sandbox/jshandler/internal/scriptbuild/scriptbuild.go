// Package scriptbuild is the one way the engine's own scripts (the prelude, supabase-js) are
// bundled by their build.go scripts under mk/jsengine.mk: `go run build.go OUT`, the npm
// packages installed beside it, esbuild with the settings every engine script shares, errors
// with file:line, the script written to OUT.
package scriptbuild

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/evanw/esbuild/pkg/api"
)

// Main bundles the script name (its messages start so) from the folder dir with opts, which
// gives what is particular to the script (entry point, output name, wrapping, plugins), and
// writes it to the path of the command line; it exits the process on any error.
func Main(name, dir string, opts api.BuildOptions) {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run build.go OUT")
		os.Exit(2)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s/node_modules is missing: run `npm ci` there (make jsengine does)\n", name, dir)
		os.Exit(1)
	}
	opts.AbsWorkingDir = dir
	opts.Bundle = true
	opts.Write = false
	opts.Format = api.FormatIIFE
	opts.Platform = api.PlatformNeutral
	opts.MainFields = []string{"module", "main"}
	opts.Conditions = []string{"worker", "import", "default"}
	opts.Target = api.ES2023
	opts.Define = map[string]string{"process.env.NODE_ENV": `"production"`}
	opts.Charset = api.CharsetUTF8
	// Comments and blanks go: the text is parsed once, into a snapshot (and a handler's bundle,
	// which supabase-js follows, keeps its text there). Lines stay, so stacks can be read.
	opts.MinifyWhitespace = true
	opts.MinifySyntax = true
	opts.MinifyIdentifiers = true
	opts.LegalComments = api.LegalCommentsNone
	opts.LogLevel = api.LogLevelSilent
	r := api.Build(opts)
	for _, m := range r.Errors {
		loc := ""
		if m.Location != nil {
			loc = fmt.Sprintf("%s:%d:%d: ", m.Location.File, m.Location.Line, m.Location.Column)
		}
		fmt.Fprintf(os.Stderr, "%s: %s%s\n", name, loc, m.Text)
	}
	if len(r.Errors) > 0 || len(r.OutputFiles) != 1 {
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], r.OutputFiles[0].Contents, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
