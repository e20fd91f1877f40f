package jshandler

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// A handler's packages resolve as for a browser (bundle.go): a package's "browser" map swaps
// its Node files for web ones. A handler runs in a worker, though, with no DOM, and some swaps
// bring in one that needs it (@aws-sdk/xml-builder's parser on DOMParser, in place of its own
// pure JavaScript one). undoDOMSwap takes such a swap back: when the file a browser map chose
// uses DOMParser, the file it replaces is used instead, if that one does not.

// domMarker is what a swapped-in file that needs the page's DOM contains.
var domMarker = []byte("DOMParser")

// undoDOMSwap returns the file a package's browser map replaced with path, when path needs
// DOMParser and that file does not; "" otherwise. The caller checks the file like any other.
func (p *project) undoDOMSwap(path string) string {
	if !strings.Contains(path, string(filepath.Separator)+"node_modules"+string(filepath.Separator)) || p.refusal(path, "") != "" {
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil || !bytes.Contains(data, domMarker) {
		return ""
	}
	pkgDir, browser := browserMap(p, filepath.Dir(path))
	for from, to := range browser {
		target, ok := to.(string)
		if !ok || !sameModule(filepath.Join(pkgDir, target), path) {
			continue
		}
		if orig := moduleFile(p, filepath.Join(pkgDir, from)); orig != "" && orig != path {
			if src, err := os.ReadFile(orig); err == nil && !bytes.Contains(src, domMarker) {
				return orig
			}
		}
	}
	return ""
}

// browserMap finds the package.json of the package holding dir (the nearest one, not above
// its node_modules folder) and returns its folder and its "browser" field when that is a map.
func browserMap(p *project, dir string) (string, map[string]any) {
	for d := dir; filepath.Base(d) != "node_modules" && d != filepath.Dir(d); d = filepath.Dir(d) {
		file := filepath.Join(d, "package.json")
		if _, err := os.Stat(file); err != nil || p.refusal(file, "") != "" {
			continue
		}
		var pkg struct {
			Browser json.RawMessage `json:"browser"`
		}
		data, err := os.ReadFile(file)
		if err != nil || json.Unmarshal(data, &pkg) != nil {
			return "", nil
		}
		var m map[string]any
		if json.Unmarshal(pkg.Browser, &m) != nil {
			return "", nil
		}
		return d, m
	}
	return "", nil
}

// sameModule reports whether the browser map's target (without or with its extension) is path.
func sameModule(target, path string) bool {
	return target == path || target == strings.TrimSuffix(path, filepath.Ext(path))
}

// moduleFile is the file an extension-less module path names, as a bundler completes it.
func moduleFile(p *project, base string) string {
	for _, c := range []string{base, base + ".js", base + ".mjs", base + ".cjs", filepath.Join(base, "index.js")} {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && p.refusal(c, "") == "" {
			return c
		}
	}
	return ""
}
