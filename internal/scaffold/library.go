package scaffold

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	pgflowgo "github.com/pgflow-wasm/pgflow-wasm/abi/go"
)

// libraryTitles names each guest library in its VERSION file.
var libraryTitles = map[string]string{"rust": "Rust", "go": "Go and TinyGo", "assemblyscript": "AssemblyScript", "c": "C",
	"typescript": "TypeScript and JavaScript (types only: the worker carries the runtime)"}

// libraryFiles returns the guest library of lang as the binary carries it, keyed by path
// relative to the project's pgflow/ folder, with a VERSION file naming the ABI version,
// the pgflow-wasm version that copied it and a digest of its files.
func libraryFiles(lang, version string) (map[string][]byte, error) {
	var src fs.FS = abi.Libraries
	root := lang
	keep := func(string) bool { return true }
	if lang == "go" {
		src, root = pgflowgo.Source, "."
		// The library's own tests stay behind; source.go is how the binary carries it.
		keep = func(name string) bool { return !strings.HasSuffix(name, "_test.go") && name != "source.go" }
	}
	files := map[string][]byte{}
	err := fs.WalkDir(src, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !keep(path.Base(p)) {
			return err
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		rel := p
		if root != "." {
			rel = strings.TrimPrefix(p, root+"/")
		}
		files[rel] = data
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("scaffold: the binary carries no %s guest library", lang)
	}
	if version == "" {
		version = "(unknown version)"
	}
	files["VERSION"] = []byte(fmt.Sprintf("pgflow-wasm guest library for %s, ABI v%d, files sha256 %s\n"+
		"Copied by `pgflow-wasm new` from pgflow-wasm %s. The files here are that binary's\n"+
		"abi/ folder as it was built; edit your handler, not them.\n",
		libraryTitles[lang], abi.Version, digest(files)[:16], version))
	return files, nil
}

// digest is a sha256 over the files' paths and contents, in path order.
func digest(files map[string][]byte) string {
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}
