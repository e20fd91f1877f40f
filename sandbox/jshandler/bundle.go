package jshandler

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/evanw/esbuild/pkg/api"
)

// globalName is the variable the bundle assigns the handler module's exports to; the
// prelude's prepare() looks the handler up there.
const globalName = "__pgflow_handler"

// bundleName is the file name the engine gives the bundle: stacks name it, and the source
// map takes it back to the user's files.
const bundleName = "handler.js"

// Bundle is a handler's entry file and everything it imports, as one script for the engine.
type Bundle struct {
	JS  []byte
	Map *SourceMap
	// Inputs are the files the bundle was made of (absolute paths), the entry first, with
	// their sha256: the bundle is reused while none of them changes.
	Inputs []Input
}

// Input is one source file of a bundle.
type Input struct {
	Path, SHA256 string
}

// BuildError is a failed bundle: every error esbuild reported, each at its file:line:column.
type BuildError struct {
	Entry    string
	Messages []string
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("%s does not build:\n%s", e.Entry, strings.Join(e.Messages, "\n"))
}

// bundles caches builds by entry path and project; a build is reused while its inputs' sha256
// stay the same.
var bundles = struct {
	sync.Mutex
	m map[string]*Bundle
}{m: map[string]*Bundle{}}

// Build bundles the handler at entry (.ts, .js, .mjs...) with esbuild, or returns the last
// build of entry when none of its inputs changed. The bundle reads only files of the
// handler's project: ProjectRoot(entry, flowsDir), flowsDir being the folder of the flows
// file that names the handler ("" when there is none). An import of anything else is a
// BuildError at the import.
func Build(entry, flowsDir string) (*Bundle, error) {
	return buildCached(entry, flowsDir, false)
}

// BuildFlowFile bundles the @pgflow/dsl flow file at entry as Build bundles a handler, behind
// an entry of the worker's (flowEntry) that serves every Flow the file exports.
func BuildFlowFile(entry, flowsDir string) (*Bundle, error) {
	return buildCached(entry, flowsDir, true)
}

func buildCached(entry, flowsDir string, flowFile bool) (*Bundle, error) {
	abs, err := filepath.Abs(entry)
	if err != nil {
		return nil, err
	}
	root, err := ProjectRoot(abs, flowsDir)
	if err != nil {
		return nil, err
	}
	key := abs + "\x00" + root + "\x00" + fmt.Sprint(flowFile)
	bundles.Lock()
	prev := bundles.m[key]
	bundles.Unlock()
	if prev != nil && unchanged(prev.Inputs) {
		return prev, nil
	}
	b, err := build(abs, root, flowFile)
	if err != nil {
		return nil, err
	}
	bundles.Lock()
	bundles.m[key] = b
	bundles.Unlock()
	return b, nil
}

func unchanged(inputs []Input) bool {
	for _, in := range inputs {
		if h, err := hashFile(in.Path); err != nil || h != in.SHA256 {
			return false
		}
	}
	return true
}

func hashFile(path string) (string, error) {
	// A source swapped for a pipe or a device would block the read: it counts as changed,
	// and the new build refuses it.
	if st, err := os.Stat(path); err != nil {
		return "", err
	} else if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

func build(entry, root string, flowFile bool) (*Bundle, error) {
	dir := filepath.Dir(entry)
	p, err := newProject(root, dir)
	if err != nil {
		return nil, &BuildError{Entry: entry, Messages: []string{err.Error()}}
	}
	if err := p.checkConfigFiles(); err != nil {
		return nil, &BuildError{Entry: entry, Messages: []string{err.Error()}}
	}
	tsconfig, err := p.tsconfig(dir)
	if err != nil {
		return nil, &BuildError{Entry: entry, Messages: []string{err.Error()}}
	}
	tsconfigRaw := ""
	if tsconfig == "" {
		// Without one, esbuild would look for tsconfig.json in every parent folder.
		tsconfigRaw = "{}"
	}
	entryPoints := []string{entry}
	var stdin *api.StdinOptions
	if flowFile {
		entryPoints = nil
		stdin = &api.StdinOptions{Contents: flowEntry(entry), ResolveDir: dir, Sourcefile: flowEntryName, Loader: api.LoaderJS}
	}
	r := api.Build(api.BuildOptions{
		EntryPoints:   entryPoints,
		Stdin:         stdin,
		AbsWorkingDir: dir,
		Outfile:       filepath.Join(dir, bundleName),
		Bundle:        true,
		Write:         false,
		Metafile:      true,
		Format:        api.FormatIIFE,
		GlobalName:    globalName,
		// Not Node: an import of a Node built-in ("node:fs") fails here, at validate, rather
		// than in a task. Packages resolve as for a web worker: the browser and worker
		// conditions of "exports", and the files a package's "browser" map swaps for its
		// non-Node ones (@aws-sdk's runtime config); the main fields stay module and main,
		// as a "browser" entry file may need a page's window and document.
		Platform:   api.PlatformBrowser,
		MainFields: []string{"module", "main"},
		Conditions: []string{"worker", "import", "default"},
		// What QuickJS-NG 0.10 runs; newer syntax is lowered.
		Target: api.ES2023,
		Define: map[string]string{"process.env.NODE_ENV": `"production"`},
		// The map stays on the host: stacks are mapped there, and each task's memory
		// does not carry it.
		Sourcemap:      api.SourceMapExternal,
		SourcesContent: api.SourcesContentExclude,
		Charset:        api.CharsetUTF8,
		LegalComments:  api.LegalCommentsNone,
		LogLevel:       api.LogLevelSilent,
		// The project's own tsconfig.json only, checked by p.tsconfig; every import and
		// every file read goes through p's check.
		Tsconfig:    tsconfig,
		TsconfigRaw: tsconfigRaw,
		Plugins:     []api.Plugin{p.plugin()},
	})
	if len(r.Errors) > 0 {
		e := &BuildError{Entry: entry}
		for _, m := range r.Errors {
			e.Messages = append(e.Messages, formatMessage(dir, p.redact(dir, m)))
		}
		return nil, e
	}
	b := &Bundle{}
	for _, f := range r.OutputFiles {
		switch {
		case strings.HasSuffix(f.Path, ".map"):
			sm, err := ParseSourceMap(f.Contents)
			if err != nil {
				return nil, fmt.Errorf("%s: esbuild's source map: %w", entry, err)
			}
			b.Map = sm
		case strings.HasSuffix(f.Path, ".js"):
			b.JS = f.Contents
		}
	}
	if b.JS == nil || b.Map == nil {
		return nil, fmt.Errorf("%s: esbuild wrote no script or no source map", entry)
	}
	inputs, err := metafileInputs(r.Metafile, dir, entry)
	if err != nil {
		return nil, err
	}
	b.Inputs = inputs
	return b, nil
}

// redact keeps a message about a file outside the project from quoting it: esbuild also
// reads package.json files in every parent folder, and a malformed one's message would
// show its line (a package.json symlinked to /proc/self/environ shows the environment).
func (p *project) redact(dir string, m api.Message) api.Message {
	why := func(l *api.Location) string {
		if l == nil || l.File == "" {
			return ""
		}
		f := l.File
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		return p.refusal(f, "")
	}
	if w := why(m.Location); w != "" {
		return api.Message{Text: fmt.Sprintf("%s: esbuild reported a problem in this file, not shown: %s; %s", m.Location.File, p.rule(), w)}
	}
	notes := m.Notes[:0:0]
	for _, n := range m.Notes {
		if why(n.Location) == "" {
			notes = append(notes, n)
		}
	}
	m.Notes = notes
	return m
}

// formatMessage is "file:line:column: text" and the line itself, as compilers print.
func formatMessage(dir string, m api.Message) string {
	if m.Location == nil {
		return m.Text
	}
	l := m.Location
	s := fmt.Sprintf("%s:%d:%d: %s", l.File, l.Line, l.Column+1, m.Text)
	if l.LineText != "" {
		s += "\n    " + l.LineText
	}
	for _, n := range m.Notes {
		// esbuild's advice to bundle for Node names its Go API: a handler cannot do that.
		if n.Text != "" && !strings.Contains(n.Text, "api.Platform") {
			s += "\n    (" + n.Text + ")"
		}
	}
	return s
}

// metafileInputs lists the bundle's source files with their sha256, the entry first.
func metafileInputs(metafile, dir, entry string) ([]Input, error) {
	var meta struct {
		Inputs map[string]json.RawMessage `json:"inputs"`
	}
	if err := json.Unmarshal([]byte(metafile), &meta); err != nil {
		return nil, fmt.Errorf("esbuild's metafile: %w", err)
	}
	paths := []string{entry}
	for p := range meta.Inputs {
		if strings.HasPrefix(p, nodeNamespace+":") || p == flowEntryName || p == "<stdin>" {
			continue // the prelude's Node built-ins and the flow file's entry: no file
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if p != entry {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths[1:])
	out := make([]Input, 0, len(paths))
	for _, p := range paths {
		h, err := hashFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, Input{Path: p, SHA256: h})
	}
	return out, nil
}
