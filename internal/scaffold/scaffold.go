// Package scaffold writes a user's own handler project: `pgflow-wasm new LANG NAME`.
//
// A project is a folder anywhere (outside this repository) that builds its module with
// `make` on a fresh Debian machine. It holds a handler skeleton with unit tests that call
// it through the ABI (each language's own test runner and the guest library's test host),
// a flows.yaml that runs it, the guest library copied from the binary (abi.Libraries and
// abi/go's Source, with a VERSION file) and the toolchain installers this repository's make
// uses (package scripts). Nothing is fetched from a registry that this repository's own
// build does not use.
package scaffold

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/scripts"
)

//go:embed all:templates
var templates embed.FS

// Language is one language a project can be written in.
type Language struct {
	Name  string // as on the command line: rust, tinygo, go, assemblyscript, c
	Title string // for people: Rust, TinyGo, ...
	// HandlerFile and TestFile name the skeleton's files ("__NAME__" is the handler's name).
	HandlerFile, TestFile string
	// TestRunner is how `make test` runs the unit tests.
	TestRunner string

	templates []string // template folders, in order; later ones win
	library   string   // guest library (libraryFiles)
	tools     []string // toolchain installers copied into tools/
	stepNote  string   // appended to the step's line in flows.yaml
	toolchain string   // the README's paragraph on the toolchain
	module    string   // the step's module file: "__NAME__.wasm" unless set
	// dslFlow: module is a @pgflow/dsl flow file that flows.yaml names (`- flow:`), whose
	// one step runs the handler.
	dslFlow  bool
	makeDoes string // what `make` does, for the next steps `new` prints: builds the module unless set
}

// ModuleFile is the file the project's step runs, for a handler named name.
func (l *Language) ModuleFile(name string) string {
	m := l.module
	if m == "" {
		m = "__NAME__.wasm"
	}
	return strings.ReplaceAll(m, "__NAME__", name)
}

// FlowFile reports whether the project's module is a @pgflow/dsl flow file (flows.yaml names
// it with `- flow:`) rather than the step's handler.
func (l *Language) FlowFile() bool { return l.dslFlow }

// MakeDoes says what the project's `make` does.
func (l *Language) MakeDoes(name string) string {
	if l.makeDoes != "" {
		return l.makeDoes
	}
	return "installs what is missing, builds " + l.ModuleFile(name)
}

// Languages lists every language `pgflow-wasm new` knows, in the order help texts show them.
var Languages = []*Language{
	{
		Name: "rust", Title: "Rust", HandlerFile: "src/lib.rs", TestFile: "src/lib.rs", TestRunner: "cargo test",
		templates: []string{"common", "rust"}, library: "rust", tools: []string{"install-apt-packages.sh"},
		toolchain: "Toolchain: Debian's Rust with the wasm32 standard library (`/usr/bin/rustc`: rustup's\n" +
			"usually lacks it) and crates from Debian's `librust-*-dev` packages, read offline from\n" +
			"`/usr/share/cargo/registry` (`.cargo/config.toml`, which also sets a 64 KiB stack: rustc's\n" +
			"default 1 MiB makes every fresh instance several times slower). `make` installs the\n" +
			"packages with apt when they are missing.",
	},
	{
		Name: "tinygo", Title: "TinyGo", HandlerFile: "main.go", TestFile: "main_test.go", TestRunner: "go test (the same source builds with TinyGo and Go)",
		templates: []string{"common", "gosrc", "tinygo"}, library: "go", tools: []string{"install-apt-packages.sh", "install-tinygo.sh"},
		stepNote: "\n        # built with -gc=leaking (Makefile): never set reuse_instance for it",
		toolchain: "Toolchain: TinyGo __TINYGO_VERSION__, which neither apt nor npm has: `make` builds it once from the\n" +
			"Go module proxy against Debian's LLVM 19 (tools/install-tinygo.sh, about a minute) into\n" +
			"`~/.cache/pgflow-wasm`, shared with every project. It needs Go 1.21 or newer on PATH.\n" +
			"go.mod says `go 1.24`: TinyGo refuses a go.mod newer than its own Go (1.25), so do not\n" +
			"let `go mod tidy` or `go get` raise it.",
	},
	{
		Name: "go", Title: "Go", HandlerFile: "main.go", TestFile: "main_test.go", TestRunner: "go test",
		templates: []string{"common", "gosrc", "go"}, library: "go",
		toolchain: "Toolchain: Go 1.21 or newer on PATH (it fetches the Go 1.24 go.mod names by itself).\n" +
			"Standard Go modules are about 3 MB and pay the Go runtime's start on every task (a few\n" +
			"milliseconds); `pgflow-wasm new tinygo` builds the same source into a 200 KB module.",
	},
	{
		Name: "assemblyscript", Title: "AssemblyScript", HandlerFile: "__NAME__.ts", TestFile: "test/__NAME__.test.mjs", TestRunner: "node --test on the built module",
		templates: []string{"common", "assemblyscript"}, library: "assemblyscript", tools: []string{"install-apt-packages.sh"},
		toolchain: "Toolchain: Node.js 20 or newer and the AssemblyScript compiler pinned by\n" +
			"`package-lock.json` (`npm ci`). Math.random, Date.now and console.log import functions\n" +
			"from JavaScript that the worker does not have: pass values in the input instead.",
	},
	{
		Name: "c", Title: "C", HandlerFile: "__NAME__.c", TestFile: "__NAME___test.c", TestRunner: "a native program with pgflow_testhost.h",
		templates: []string{"common", "c"}, library: "c", tools: []string{"install-apt-packages.sh"},
		toolchain: "Toolchain: Debian's clang, lld and wasi-libc (`make` installs them with apt when\n" +
			"missing); the unit tests are built natively with the same clang.",
	},
	{
		Name: "typescript", Title: "TypeScript", HandlerFile: "__NAME__.ts", TestFile: "__NAME__.test.json",
		TestRunner: "pgflow-wasm module test: each case a task through the sandbox",
		templates:  []string{"common", "typescript"}, library: "typescript", module: "flow.ts", dslFlow: true,
		makeDoes: "npm ci (@pgflow/dsl), then pgflow-wasm validate: the flow builds and loads (nothing to compile)",
	},
}

// Lookup finds a language by name.
func Lookup(name string) (*Language, error) {
	for _, l := range Languages {
		if l.Name == name {
			return l, nil
		}
	}
	return nil, fmt.Errorf("unknown language %q: use %s", name, strings.Join(Names(), ", "))
}

// Names lists the languages' names.
func Names() []string {
	var names []string
	for _, l := range Languages {
		names = append(names, l.Name)
	}
	return names
}

// Options of New.
type Options struct {
	Lang string
	// Dir is the project folder: created, or an empty folder.
	Dir string
	// Name is the handler's name: the flow and step slug and the module file. Default: Dir's base name.
	Name string
	// Version is pgflow-wasm's own version, written to pgflow/VERSION.
	Version string
}

// Project is what New wrote.
type Project struct {
	Dir    string // absolute
	Name   string
	Module string // the module file `make` builds, relative to Dir
	Lang   *Language
	Files  []string // every file written, relative to Dir, sorted
	// Library describes the guest library copy (the first line of pgflow/VERSION).
	Library string
}

// HandlerFile is the skeleton's handler file, relative to Dir.
func (p *Project) HandlerFile() string {
	return strings.ReplaceAll(p.Lang.HandlerFile, "__NAME__", p.Name)
}

// TestFile is the skeleton's unit test file, relative to Dir.
func (p *Project) TestFile() string { return strings.ReplaceAll(p.Lang.TestFile, "__NAME__", p.Name) }

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// maxName is pgflow's limit on a flow slug (it names the pgmq queue).
const maxName = 47

// reserved names clash with pgflow (run), the guest library (pgflow) or a language's own
// crates and packages.
var reserved = []string{"run", "pgflow", "std", "core", "alloc", "test", "main", "serde", "serde_json", "proc_macro"}

// CheckName reports whether name can name a handler in every language: it becomes the flow
// and step slug, the module file, the crate, Go module or npm package.
func CheckName(name string) error {
	switch {
	case !nameRE.MatchString(name):
		return fmt.Errorf("%q cannot name a handler: use lower-case letters, digits and _, starting with a letter (e.g. %s): it becomes the flow slug, the step slug and the module's file name", name, suggest(name))
	case len(name) > maxName:
		return fmt.Errorf("%q is %d characters: at most %d (it names the flow, whose pgmq queue name must be shorter than 48)", name, len(name), maxName)
	case slices.Contains(reserved, name):
		return fmt.Errorf("%q is taken (by pgflow, the guest library or a language's own packages): choose another name, e.g. my_%s", name, name)
	}
	return nil
}

// suggest turns an invalid name into a valid one (My-Handler -> my_handler).
func suggest(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	s := strings.Trim(b.String(), "_")
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		s = "handler_" + s
	}
	return strings.TrimRight(s, "_")
}

// New writes a project. It refuses a folder that exists and is not empty, and writes
// nothing when any step fails.
func New(opts Options) (*Project, error) {
	lang, err := Lookup(opts.Lang)
	if err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		return nil, errors.New("no folder given")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = filepath.Base(dir)
	}
	if err := CheckName(name); err != nil {
		if opts.Name == "" {
			return nil, fmt.Errorf("the folder's name %v; or give the handler a name with --name", err)
		}
		return nil, err
	}
	if err := checkEmpty(dir); err != nil {
		return nil, err
	}

	files, err := render(lang, name, opts.Version)
	if err != nil {
		return nil, err
	}
	p := &Project{Dir: dir, Name: name, Module: lang.ModuleFile(name), Lang: lang}
	for rel := range files {
		p.Files = append(p.Files, rel)
	}
	slices.Sort(p.Files)
	p.Library, _, _ = strings.Cut(string(files["pgflow/VERSION"].data), "\n")
	return p, writeAll(dir, files)
}

// checkEmpty refuses a folder with anything in it: a project never overwrites a file.
func checkEmpty(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is a file, not a folder", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s already exists and is not empty: choose a new folder (nothing was written)", dir)
	}
	return nil
}

// file is one file of a project.
type file struct {
	data []byte
	mode fs.FileMode
}

// render produces every file of a project, keyed by path relative to its folder.
func render(lang *Language, name, version string) (map[string]file, error) {
	tinygo, err := TinyGoVersion()
	if err != nil {
		return nil, err
	}
	files := map[string]file{}
	for _, dir := range lang.templates {
		root := path.Join("templates", dir)
		err := fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := templates.ReadFile(p)
			if err != nil {
				return err
			}
			rel := strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")
			files[strings.ReplaceAll(rel, "__NAME__", name)] = file{data: data, mode: 0o644}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	lib, err := libraryFiles(lang.library, version)
	if err != nil {
		return nil, err
	}
	for rel, data := range lib {
		files["pgflow/"+rel] = file{data: data, mode: 0o644}
	}
	for _, t := range lang.tools {
		data := scripts.InstallAptPackages
		if t == "install-tinygo.sh" {
			data = scripts.InstallTinyGo
		}
		files["tools/"+t] = file{data: data, mode: 0o755}
	}

	fileTable := fmt.Sprintf("| `%s` | the handler |\n", strings.ReplaceAll(lang.HandlerFile, "__NAME__", name))
	if lang.TestFile != lang.HandlerFile {
		fileTable += fmt.Sprintf("| `%s` | its unit tests |\n", strings.ReplaceAll(lang.TestFile, "__NAME__", name))
	} else {
		fileTable = fmt.Sprintf("| `%s` | the handler and its unit tests |\n", strings.ReplaceAll(lang.HandlerFile, "__NAME__", name))
	}
	fileTable += "| `Makefile` | `make` (toolchain, build), `make test`, `make clean` |\n"
	replace := strings.NewReplacer(
		"__TOOLCHAIN_NOTE__", strings.ReplaceAll(lang.toolchain, "__TINYGO_VERSION__", tinygo),
		"__STEP_NOTE__", lang.stepNote,
		"__FILE_TABLE__", fileTable,
		"__TEST_RUNNER__", lang.TestRunner,
		"__LANG_TITLE__", lang.Title,
		"__LANG__", lang.Name,
		"__TINYGO_VERSION__", tinygo,
	)
	for rel, f := range files {
		if strings.HasPrefix(rel, "pgflow/") || strings.HasPrefix(rel, "tools/") {
			continue // copied as they are
		}
		text := replace.Replace(string(f.data))
		f.data = []byte(strings.ReplaceAll(text, "__NAME__", name))
		files[rel] = f
	}
	return files, nil
}

var tinygoVersionRE = regexp.MustCompile(`(?m)^version=\$\{TINYGO_VERSION:-([0-9][0-9.]*)\}$`)

// TinyGoVersion is the TinyGo version install-tinygo.sh installs by default.
func TinyGoVersion() (string, error) {
	m := tinygoVersionRE.FindSubmatch(scripts.InstallTinyGo)
	if m == nil {
		return "", errors.New("scaffold: install-tinygo.sh names no default TinyGo version")
	}
	return string(m[1]), nil
}

// writeAll writes the files into a fresh folder beside dir, then renames it to dir, so a
// failure leaves nothing half-written.
func writeAll(dir string, files map[string]file) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for rel, f := range files {
		p := filepath.Join(tmp, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	// An empty folder that exists is replaced; checkEmpty let only such a folder through.
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Rename(tmp, dir)
}
