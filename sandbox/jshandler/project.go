package jshandler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// A handler is bundled from the files of its own project only: esbuild follows every import,
// and the worker's files (/proc/self/environ, a token file, another project's secrets) must not
// become a handler's text. The project is a folder (ProjectRoot); every file esbuild resolves
// or loads must lie in it once symlinks are followed, and nothing under /proc, /dev or /sys is
// ever read, whatever the project.

// markerDepth bounds how far above a handler's folder ProjectRoot looks for its project: a
// handler in src/handlers/ finds the package.json two levels up, and a marker far above (a
// package.json in a home or temporary folder) does not make that folder the project.
const markerDepth = 3

// projectMarkers are the files and folders that make a folder a handler's project.
var projectMarkers = []string{"flows.yaml", "package.json", "node_modules"}

// systemFolders are never read, inside a project or not.
var systemFolders = []string{"/proc", "/dev", "/sys"}

// ProjectRoot is the folder a handler's imports may read: flowsDir (the folder of the flows
// file naming the handler) when the handler lies in it; otherwise the nearest of the handler's
// folder and its markerDepth parents holding flows.yaml, package.json or node_modules, the
// search stopping before the file system's root, the home folder and the temporary folder
// (a marker there is no project); otherwise the handler's own folder.
func ProjectRoot(entry, flowsDir string) (string, error) {
	abs, err := filepath.Abs(entry)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(abs)
	if flowsDir != "" {
		fd, err := filepath.Abs(flowsDir)
		if err != nil {
			return "", err
		}
		if within(fd, dir) {
			return fd, nil
		}
		if rd, err1 := filepath.EvalSymlinks(dir); err1 == nil {
			if rf, err2 := filepath.EvalSymlinks(fd); err2 == nil && within(rf, rd) {
				return fd, nil
			}
		}
	}
	home, _ := os.UserHomeDir()
	stops := []string{home, os.TempDir(), string(filepath.Separator)}
	d := dir
	for range markerDepth + 1 {
		if slices.ContainsFunc(stops, func(s string) bool { return s != "" && filepath.Clean(s) == d }) {
			break
		}
		if slices.ContainsFunc(projectMarkers, func(m string) bool { _, err := os.Stat(filepath.Join(d, m)); return err == nil }) {
			return d, nil
		}
		d = filepath.Dir(d)
	}
	return dir, nil
}

// within reports whether path is root or lies under it (both clean and absolute).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// nodeNamespace holds the Node built-ins the prelude provides.
const nodeNamespace = "pgflow-node"

// nodeBuiltins are the Node modules a handler may import (as node:x, or as a bare x that no
// installed package provides), as Supabase's Edge Runtime offers them (prelude/node.js).
var nodeBuiltins = []string{"buffer", "events", "util", "crypto"}

// denoSpecifier reads an import as Deno writes it: npm:pkg@1.2/sub and jsr:@scope/pkg@^1
// become the package path (pkg/sub, @scope/pkg), resolved from the project's node_modules
// like any import; node:x names a built-in (builtin is x) when the prelude has it and is an
// error otherwise. Any other path is returned as it is, with builtin set when it is the bare
// name of one (a package may require("buffer")).
func denoSpecifier(spec string) (path, builtin string, err error) {
	switch {
	case strings.HasPrefix(spec, "node:"):
		name := strings.TrimPrefix(spec, "node:")
		if slices.Contains(nodeBuiltins, name) {
			return spec, name, nil
		}
		return "", "", fmt.Errorf("import of %q refused: handlers run in pgflow-wasm's sandbox, which has no %s (no files, processes or sockets of the worker); "+
			"the Node built-ins here are node:%s, and fetch reaches the step's granted hosts (docs/guests.md)", spec, name, strings.Join(nodeBuiltins, ", node:"))
	case strings.HasPrefix(spec, "npm:"), strings.HasPrefix(spec, "jsr:"):
		rest := strings.TrimPrefix(strings.TrimPrefix(spec, "npm:"), "jsr:")
		rest = strings.TrimPrefix(rest, "/")
		name, sub := rest, ""
		// The name is @scope/pkg or pkg; a version follows it after @, a subpath after /.
		start := 0
		if strings.HasPrefix(name, "@") {
			i := strings.Index(name, "/")
			if i < 0 {
				return "", "", fmt.Errorf("import of %q: a scoped package is written @scope/name", spec)
			}
			start = i + 1
		}
		if i := strings.Index(name[start:], "/"); i >= 0 {
			name, sub = name[:start+i], name[start+i:]
		}
		if i := strings.Index(name[start:], "@"); i >= 0 {
			name = name[:start+i]
		}
		if name == "" || name == "@" {
			return "", "", fmt.Errorf("import of %q: no package name", spec)
		}
		return name + sub, "", nil
	}
	if slices.Contains(nodeBuiltins, spec) {
		return spec, spec, nil
	}
	return spec, "", nil
}

// jsrMirrorName is the npm name of a JSR package (@scope/pkg/sub -> @jsr/scope__pkg/sub),
// as npm installs it from JSR's npm registry; "" for an unscoped name.
func jsrMirrorName(path string) string {
	if !strings.HasPrefix(path, "@") {
		return ""
	}
	parts := strings.SplitN(path[1:], "/", 3)
	if len(parts) < 2 {
		return ""
	}
	out := "@jsr/" + parts[0] + "__" + parts[1]
	if len(parts) == 3 {
		out += "/" + parts[2]
	}
	return out
}

func systemFolder(path string) string {
	for _, s := range systemFolders {
		if within(s, path) {
			return s
		}
	}
	return ""
}

// project is the root a bundle may read, as given and with its symlinks followed.
type project struct {
	root, real string
	entryDir   string // where messages' file names start from, as esbuild's
}

func newProject(root, entryDir string) (*project, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("the handler's project folder %s: %w", root, err)
	}
	if s := systemFolder(real); s != "" {
		return nil, fmt.Errorf("the handler's project folder %s is under %s, which no handler may read: keep handlers in a folder of their own", root, s)
	}
	return &project{root: root, real: real, entryDir: entryDir}, nil
}

// refusal says why path (a file esbuild would read) is not the project's, or "" when it is.
// lexical is where the import points before symlinks are followed ("" when unknown: esbuild
// hands over paths with their symlinks followed), to name a symlink as the way out.
func (p *project) refusal(path, lexical string) string {
	if s := systemFolder(path); s != "" {
		return fmt.Sprintf("%s is under %s, which belongs to the worker", path, s)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Sprintf("%s cannot be checked (%v)", path, err)
	}
	if s := systemFolder(real); s != "" {
		return fmt.Sprintf("%s leads through a symlink to %s, under %s, which belongs to the worker", path, real, s)
	}
	if within(p.real, real) {
		if st, err := os.Stat(real); err == nil && !st.Mode().IsRegular() && !st.IsDir() {
			return fmt.Sprintf("%s is not a regular file (a pipe, socket or device: reading it could stall the worker)", real)
		}
		return ""
	}
	for _, l := range []string{path, lexical} {
		if l != "" && l != real && (within(p.root, l) || within(p.real, l)) {
			return fmt.Sprintf("%s leads through a symlink to %s, outside the project (copy the file into the project rather than linking it)", l, real)
		}
	}
	return fmt.Sprintf("%s is outside the project (copy the file into the project)", real)
}

// rule is what every refusal says the handler may do.
func (p *project) rule() string {
	return fmt.Sprintf("a handler may import only files of its own project (%s) and its node_modules", p.root)
}

// resolvingAgain marks the plugin's own call to build.Resolve, which passes through the
// plugin again and must then resolve as esbuild would.
type resolvingAgain struct{}

// plugin checks every file esbuild resolves (an import of any kind: static, dynamic, require,
// with a loader attribute, through tsconfig paths or package.json imports and exports) and
// every file it loads against the project. A refused import is an error at the import's
// file:line:column.
func (p *project) plugin() api.Plugin {
	return api.Plugin{
		Name: "project",
		Setup: func(build api.PluginBuild) {
			build.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(args api.OnResolveArgs) (api.OnResolveResult, error) {
				if _, again := args.PluginData.(resolvingAgain); again {
					return api.OnResolveResult{}, nil
				}
				refuse := func(why string) (api.OnResolveResult, error) {
					return api.OnResolveResult{Errors: []api.Message{{
						Text: fmt.Sprintf("import of %q refused: %s; %s", args.Path, p.rule(), why),
					}}}, nil
				}
				if args.Kind != api.ResolveEntryPoint && filepath.IsAbs(args.Path) {
					if s := systemFolder(filepath.Clean(args.Path)); s != "" {
						return refuse(fmt.Sprintf("%s belongs to the worker", s))
					}
					return refuse("it is an absolute path (import the project's files by a relative path)")
				}
				path, builtin, err := denoSpecifier(args.Path)
				if err != nil {
					return api.OnResolveResult{Errors: []api.Message{{Text: err.Error()}}}, nil
				}
				resolve := func(path string) api.ResolveResult {
					return build.Resolve(path, api.ResolveOptions{
						Importer: args.Importer, Namespace: args.Namespace, ResolveDir: args.ResolveDir,
						Kind: args.Kind, With: args.With, PluginData: resolvingAgain{},
					})
				}
				if builtin != "" && strings.HasPrefix(args.Path, "node:") {
					return api.OnResolveResult{Path: builtin, Namespace: nodeNamespace}, nil
				}
				r := resolve(path)
				if len(r.Errors) > 0 && strings.HasPrefix(args.Path, "jsr:") {
					// npm's JSR mirror names @scope/pkg @jsr/scope__pkg.
					if alt := jsrMirrorName(path); alt != "" {
						if r2 := resolve(alt); len(r2.Errors) == 0 {
							r = r2
						}
					}
				}
				if len(r.Errors) > 0 && builtin != "" {
					// A bare "buffer" or "events" a package requires, not installed: Node's own.
					return api.OnResolveResult{Path: builtin, Namespace: nodeNamespace}, nil
				}
				if len(r.Errors) > 0 {
					// esbuild says why itself, in its own words, when it resolves the import.
					return api.OnResolveResult{}, nil
				}
				if r.External || r.Path == "" || (r.Namespace != "file" && r.Namespace != "") {
					return api.OnResolveResult{}, nil
				}
				if orig := p.undoDOMSwap(r.Path); orig != "" {
					r.Path = orig
				}
				lexical := ""
				if strings.HasPrefix(args.Path, "./") || strings.HasPrefix(args.Path, "../") {
					lexical = filepath.Join(args.ResolveDir, args.Path)
				}
				if why := p.refusal(r.Path, lexical); why != "" {
					if args.Kind == api.ResolveEntryPoint {
						return api.OnResolveResult{Errors: []api.Message{{
							Text: fmt.Sprintf("the handler is refused: %s; %s", p.rule(), why),
						}}}, nil
					}
					return refuse(why)
				}
				side := api.SideEffectsTrue
				if !r.SideEffects {
					side = api.SideEffectsFalse
				}
				return api.OnResolveResult{Path: r.Path, Namespace: r.Namespace, Suffix: r.Suffix, SideEffects: side}, nil
			})
			// The Node built-ins the prelude carries (prelude/node.js): the module is the
			// prelude's object, so no file is read.
			build.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: nodeNamespace}, func(args api.OnLoadArgs) (api.OnLoadResult, error) {
				js := fmt.Sprintf("module.exports = globalThis.__pgflow_node(%q);", args.Path)
				return api.OnLoadResult{Contents: &js, Loader: api.LoaderJS}, nil
			})
			// Every load is checked too, so no way of resolving that bypasses the check above
			// reads a file outside the project.
			build.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: "file"}, func(args api.OnLoadArgs) (api.OnLoadResult, error) {
				if why := p.refusal(args.Path, ""); why != "" {
					return api.OnLoadResult{Errors: []api.Message{{Text: fmt.Sprintf("reading %s refused: %s; %s", args.Path, p.rule(), why)}}}, nil
				}
				if m := p.sourceMapComments(args.Path); m != nil {
					return api.OnLoadResult{Errors: []api.Message{*m}}, nil
				}
				return api.OnLoadResult{}, nil
			})
		},
	}
}

// sourceMapComments checks the source map a file links (`//# sourceMappingURL=...`): esbuild
// reads it, wherever it is, to chain the file's own map, which would read any file of the
// machine (and stall on a pipe or /dev/zero). Every "sourceMappingURL=" of the file counts,
// in a comment or not, and every reading of its argument esbuild might make (up to a space,
// the line's end or "*/"), so no form esbuild accepts escapes the check; a map that does not
// exist is skipped, as esbuild skips it.
func (p *project) sourceMapComments(file string) *api.Message {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil // esbuild reports it
	}
	const key = "sourceMappingURL="
	for off := 0; ; {
		i := bytes.Index(data[off:], []byte(key))
		if i < 0 {
			return nil
		}
		at := off + i
		start := at + len(key)
		off = start
		for _, target := range pragmaArgs(string(data[start:])) {
			path, ok := sourceMapPath(target, filepath.Dir(file))
			if !ok {
				continue
			}
			if _, err := os.Lstat(path); err != nil {
				continue
			}
			why := p.refusal(path, "")
			if why == "" {
				continue
			}
			line := bytes.Count(data[:at], []byte("\n")) + 1
			lineStart := bytes.LastIndexByte(data[:at], '\n') + 1
			lineEnd := bytes.IndexByte(data[at:], '\n')
			if lineEnd < 0 {
				lineEnd = len(data) - at
			}
			shown := file
			if rel, err := filepath.Rel(p.entryDir, file); err == nil {
				shown = rel
			}
			return &api.Message{
				Text: fmt.Sprintf("source map %q refused: %s; %s", target, p.rule(), why),
				Location: &api.Location{File: shown, Line: line, Column: start - lineStart,
					LineText: string(data[lineStart : at+lineEnd])},
			}
		}
	}
}

// pragmaArgs are the readings of a comment's argument at the start of text: esbuild's runs
// to the first JavaScript white space, which excludes line ends (a block comment's argument
// may span lines), within the comment (before "*/"); and the run to the line's end.
func pragmaArgs(text string) []string {
	isSpace := func(r rune) bool {
		switch r {
		case '\t', '\v', '\f', ' ', '\u00a0', '\u1680', '\u202f', '\u205f', '\u3000', '\ufeff':
			return true
		}
		return r >= '\u2000' && r <= '\u200a'
	}
	isLineEnd := func(r rune) bool { return r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029' }
	var out []string
	for _, stop := range []func(rune) bool{isSpace, func(r rune) bool { return isSpace(r) || isLineEnd(r) }} {
		arg := text
		if i := strings.IndexFunc(text, stop); i >= 0 {
			arg = text[:i]
		}
		out = append(out, arg)
		if before, _, found := strings.Cut(arg, "*/"); found {
			out = append(out, before)
		}
	}
	return out
}

// sourceMapPath is the file a sourceMappingURL names, as esbuild reads it; false for a data:
// URL or another scheme, which read no file.
func sourceMapPath(target, dir string) (string, bool) {
	if target == "" || strings.HasPrefix(target, "data:") {
		return "", false
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "" && u.Scheme != "file") {
		return "", false
	}
	if u.Scheme == "file" || strings.HasPrefix(u.Path, "/") {
		return filepath.Clean(u.Path), true
	}
	return filepath.Join(dir, u.Path), true
}

// configFiles are the files esbuild reads in the folders it visits, outside any import.
var configFiles = map[string]bool{"package.json": true, "tsconfig.json": true, "jsconfig.json": true,
	".pnp.data.json": true, ".pnp.cjs": true, ".pnp.js": true}

// checkConfigFiles refuses a package.json, tsconfig.json or Yarn PnP file of the project
// that is a symlink out of it or not a regular file: esbuild reads those of every folder it
// visits while resolving, before any import is checked, so one linked to /dev/zero or a pipe
// would stall the worker and one linked to a secret would be quoted in esbuild's message.
func (p *project) checkConfigFiles() error {
	var refused error
	_ = filepath.WalkDir(p.real, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable folder: esbuild cannot read it either
		}
		if d.IsDir() || !configFiles[d.Name()] || d.Type().IsRegular() {
			return nil
		}
		if why := p.refusal(path, ""); why != "" {
			refused = fmt.Errorf("%s refused: esbuild reads it while it resolves imports, and %s; %s", path, p.rule(), why)
			return filepath.SkipAll
		}
		return nil
	})
	return refused
}

// tsconfig is the tsconfig.json (or jsconfig.json) the bundle uses: the nearest one from the
// handler's folder up to the project's root, "" when there is none. esbuild otherwise reads
// every tsconfig.json it finds in a file's parent folders, up to the file system's root, and
// the files they extend; with one given, it reads only that one and its extends, which are
// checked here to be the project's own files.
func (p *project) tsconfig(entryDir string) (string, error) {
	d, err := filepath.EvalSymlinks(entryDir)
	if err != nil || !within(p.real, d) {
		return "", nil // the entry itself is refused
	}
	for {
		for _, name := range []string{"tsconfig.json", "jsconfig.json"} {
			f := filepath.Join(d, name)
			// As esbuild: a file, or a symlink to one (whose target is checked).
			if st, err := os.Stat(f); err == nil && !st.IsDir() {
				return f, p.checkTsconfig(f, "", map[string]bool{})
			}
		}
		if d == p.real {
			return "", nil
		}
		d = filepath.Dir(d)
	}
}

// checkTsconfig checks file (named by the "extends" of from, or the project's tsconfig) and
// the files it extends: each must be the project's own.
func (p *project) checkTsconfig(file, from string, visited map[string]bool) error {
	refused := func(why string) error {
		if from == "" {
			return fmt.Errorf("%s refused: %s; %s", file, p.rule(), why)
		}
		return fmt.Errorf("%s: \"extends\" of %s refused: %s; %s", from, file, p.rule(), why)
	}
	if why := p.refusal(file, ""); why != "" {
		return refused(why)
	}
	real, _ := filepath.EvalSymlinks(file)
	if visited[real] {
		return nil // a cycle: esbuild reports it
	}
	visited[real] = true
	data, err := os.ReadFile(real)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var doc struct {
		Extends json.RawMessage `json:"extends"`
	}
	if err := json.Unmarshal(stripJSONC(data), &doc); err != nil {
		return fmt.Errorf("%s is not JSON (comments and trailing commas allowed): %v; fix the file, or remove it if no tool needs it", file, err)
	}
	var extends []string
	if len(doc.Extends) > 0 && string(doc.Extends) != "null" {
		var one string
		if json.Unmarshal(doc.Extends, &one) == nil {
			extends = []string{one}
		} else if err := json.Unmarshal(doc.Extends, &extends); err != nil {
			return fmt.Errorf("%s: \"extends\" must be a path or a list of paths", file)
		}
	}
	for _, ext := range extends {
		switch {
		case ext == "." || ext == "..":
			ext += "/tsconfig.json"
		case !filepath.IsAbs(ext) && !strings.HasPrefix(ext, "./") && !strings.HasPrefix(ext, "../"):
			return fmt.Errorf("%s: \"extends\": %q refused: the worker reads a base config only by a relative path inside the project (%s); copy %q into the project and extend it by its relative path",
				file, ext, p.root, ext)
		}
		target := ext
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(real), target)
		}
		// As esbuild does: the path, else the path with ".json" added; both are checked.
		candidates := []string{target}
		if !strings.HasSuffix(target, ".json") {
			candidates = append(candidates, target+".json")
		}
		for _, c := range candidates {
			if _, err := os.Lstat(c); err != nil {
				continue // not there: esbuild warns and goes on
			}
			if st, err := os.Stat(c); err == nil && st.IsDir() {
				continue
			}
			if err := p.checkTsconfig(c, file, visited); err != nil {
				return err
			}
		}
	}
	return nil
}

// stripJSONC drops the comments and trailing commas tsconfig.json may have, leaving JSON.
func stripJSONC(data []byte) []byte {
	var out bytes.Buffer
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString:
			out.WriteByte(c)
			if c == '\\' && i+1 < len(data) {
				i++
				out.WriteByte(data[i])
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
			out.WriteByte(c)
		case c == '/' && i+1 < len(data) && data[i+1] == '/':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			out.WriteByte('\n')
		case c == '/' && i+1 < len(data) && data[i+1] == '*':
			end := bytes.Index(data[i+2:], []byte("*/"))
			if end < 0 {
				i = len(data)
			} else {
				i += 2 + end + 1
			}
			out.WriteByte(' ')
		default:
			out.WriteByte(c)
		}
	}
	// Trailing commas: a comma followed only by white space before } or ].
	b := out.Bytes()
	res := make([]byte, 0, len(b))
	inString = false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			res = append(res, c)
			if c == '\\' && i+1 < len(b) {
				i++
				res = append(res, b[i])
			} else if c == '"' {
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
		}
		if c == ',' {
			j := i + 1
			for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r') {
				j++
			}
			if j < len(b) && (b[j] == '}' || b[j] == ']') {
				continue
			}
		}
		res = append(res, c)
	}
	return res
}
