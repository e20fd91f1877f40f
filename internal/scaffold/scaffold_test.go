package scaffold

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/scripts"
)

// repo is the checkout this package lives in.
func repo(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readRepo(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(repo(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var placeholderRE = regexp.MustCompile(`__[A-Z][A-Z_]*__`)

func TestEveryLanguageRendersCompletely(t *testing.T) {
	for _, lang := range Languages {
		files, err := render(lang, "hello_world", "v-test")
		if err != nil {
			t.Fatalf("%s: %v", lang.Name, err)
		}
		for _, want := range []string{"Makefile", "flows.yaml", "README.md", ".gitignore", "pgflow/VERSION",
			strings.ReplaceAll(lang.HandlerFile, "__NAME__", "hello_world"), strings.ReplaceAll(lang.TestFile, "__NAME__", "hello_world")} {
			if _, ok := files[want]; !ok {
				t.Errorf("%s: no %s", lang.Name, want)
			}
		}
		for rel, f := range files {
			if strings.HasPrefix(rel, "pgflow/") || strings.HasPrefix(rel, "tools/") {
				continue // copied as they are (C's library is full of __attribute__)
			}
			if m := placeholderRE.Find(f.data); m != nil || strings.Contains(rel, "__") {
				t.Errorf("%s: %s keeps a placeholder: %s", lang.Name, rel, m)
			}
			if strings.HasSuffix(rel, ".tmpl") {
				t.Errorf("%s: %s keeps its template suffix", lang.Name, rel)
			}
		}
		if lang.Name != "go" && lang.Name != "typescript" && files["tools/install-apt-packages.sh"].mode != 0o755 {
			t.Errorf("%s: the apt installer is not executable", lang.Name)
		}
		key := "module: "
		if lang.dslFlow {
			key = "flow: "
		}
		if !bytes.Contains(files["flows.yaml"].data, []byte(key+lang.ModuleFile("hello_world"))) {
			t.Errorf("%s: flows.yaml does not run %s:\n%s", lang.Name, lang.ModuleFile("hello_world"), files["flows.yaml"].data)
		}
	}
}

// The library in a project is exactly abi/<lang> of this checkout (the binary carries it).
func TestLibraryIsTheCheckoutsABIFolder(t *testing.T) {
	for lang, want := range map[string][]string{
		"rust":           {"Cargo.toml", "src/lib.rs"},
		"c":              {"pgflow.h", "pgflow_json.h", "pgflow_testhost.h"},
		"assemblyscript": {"index.ts", "json.ts", "number.ts", "pgflow.ts", "testhost.mjs"},
		"go":             {"go.mod", "pgflow.go", "capability.go", "sql.go", "host_wasip1.go", "host_other.go", "testhost.go"},
		"typescript":     {"pgflow.d.ts"},
	} {
		files, err := libraryFiles(lang, "v-test")
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != len(want)+1 {
			var got []string
			for n := range files {
				got = append(got, n)
			}
			t.Errorf("%s: library files %v, want %v and VERSION", lang, got, want)
		}
		for _, rel := range want {
			if !bytes.Equal(files[rel], readRepo(t, filepath.Join("abi", lang, rel))) {
				t.Errorf("%s: %s differs from abi/%s/%s", lang, rel, lang, rel)
			}
		}
		v := string(files["VERSION"])
		if !strings.Contains(v, "ABI v1") || !strings.Contains(v, "pgflow-wasm v-test") || !regexp.MustCompile(`sha256 [0-9a-f]{16}`).MatchString(v) {
			t.Errorf("%s: VERSION says:\n%s", lang, v)
		}
	}
}

// The toolchain pins a project gets are the ones this repository's make uses.
func TestPinsMatchTheRepositorysToolchains(t *testing.T) {
	tinygo, err := TinyGoVersion()
	if err != nil {
		t.Fatal(err)
	}
	if mk := readRepo(t, "mk/toolchains.mk"); !bytes.Contains(mk, []byte("TINYGO_VERSION ?= "+tinygo+"\n")) {
		t.Errorf("install-tinygo.sh installs TinyGo %s, mk/toolchains.mk another one", tinygo)
	}

	// TinyGo refuses a go.mod whose go line is newer than the Go it runs with.
	m := regexp.MustCompile(`gotool=\$\{TINYGO_GO:-go1\.(\d+)`).FindSubmatch(scripts.InstallTinyGo)
	if m == nil {
		t.Fatal("install-tinygo.sh names no Go for TinyGo")
	}
	tinygoGo, _ := strconv.Atoi(string(m[1]))
	gomod, err := templates.ReadFile("templates/gosrc/go.mod.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	g := regexp.MustCompile(`(?m)^go 1\.(\d+)$`).FindSubmatch(gomod)
	if g == nil {
		t.Fatal("the project's go.mod has no go line")
	}
	if line, _ := strconv.Atoi(string(g[1])); line > tinygoGo || line < 24 {
		t.Errorf("the project's go.mod says go 1.%d: TinyGo runs with Go 1.%d and standard Go needs 1.24 for go:wasmexport", line, tinygoGo)
	}

	// Rust: the examples' cargo settings (Debian's crates offline, the 64 KiB stack).
	cfg, _ := templates.ReadFile("templates/rust/.cargo/config.toml")
	if !bytes.Equal(cfg, readRepo(t, "modules/examples/rust/.cargo/config.toml")) {
		t.Error("the project's .cargo/config.toml differs from the Rust examples'")
	}

	// AssemblyScript: the same compiler and lock as the examples, names aside.
	var tmpl, examples map[string]any
	tb, _ := templates.ReadFile("templates/assemblyscript/package-lock.json")
	if err := json.Unmarshal(tb, &tmpl); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(readRepo(t, "modules/examples/assemblyscript/package-lock.json"), &examples); err != nil {
		t.Fatal(err)
	}
	tp, ep := tmpl["packages"].(map[string]any), examples["packages"].(map[string]any)
	for name, want := range ep {
		got, _ := json.Marshal(tp[name])
		exp, _ := json.Marshal(want)
		if name == "" {
			got, _ = json.Marshal(tp[""].(map[string]any)["devDependencies"])
			exp, _ = json.Marshal(want.(map[string]any)["devDependencies"])
		}
		if !bytes.Equal(got, exp) {
			t.Errorf("package-lock.json %q: project %s, examples %s", name, got, exp)
		}
	}
	if len(tp) != len(ep) {
		t.Errorf("the project's lock has %d packages, the examples' %d", len(tp), len(ep))
	}
	pj, _ := templates.ReadFile("templates/assemblyscript/package.json")
	if !bytes.Contains(readRepo(t, "modules/examples/assemblyscript/package.json"), regexp.MustCompile(`"assemblyscript": "[^"]+"`).Find(pj)) {
		t.Errorf("the project's package.json pins another compiler than the examples'")
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"hello", "resize_image", "a1", strings.Repeat("a", 47)} {
		if err := CheckName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"My-Handler":            "e.g. my_handler",
		"1st":                   "e.g. handler_1st",
		"":                      "cannot name a handler",
		strings.Repeat("a", 48): "at most 47",
		"pgflow":                "is taken",
		"run":                   "is taken",
	} {
		err := CheckName(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", bad, err, want)
		}
	}
}

func TestNewWritesAFolderAndNeverOverwrites(t *testing.T) {
	base := t.TempDir()
	p, err := New(Options{Lang: "c", Dir: filepath.Join(base, "greeter"), Version: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "greeter" || p.Module != "greeter.wasm" || p.HandlerFile() != "greeter.c" || p.TestFile() != "greeter_test.c" {
		t.Errorf("project %+v", p)
	}
	for _, rel := range p.Files {
		if _, err := os.Stat(filepath.Join(p.Dir, rel)); err != nil {
			t.Errorf("listed but not written: %v", err)
		}
	}
	if st, err := os.Stat(filepath.Join(p.Dir, "tools", "install-apt-packages.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("installer: %v %v", st, err)
	}

	// A second New into the same folder refuses and changes nothing.
	before, _ := os.ReadFile(filepath.Join(p.Dir, "greeter.c"))
	if _, err := New(Options{Lang: "rust", Dir: p.Dir}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("second New: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(p.Dir, "greeter.c"))
	if !bytes.Equal(before, after) {
		t.Error("the second New changed a file")
	}

	// An empty folder is fine; a file is not; a bad folder name points at --name.
	empty := filepath.Join(base, "empty_one")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Lang: "go", Dir: empty}); err != nil {
		t.Errorf("empty folder: %v", err)
	}
	if _, err := New(Options{Lang: "go", Dir: filepath.Join(p.Dir, "greeter.c"), Name: "x"}); err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("file: %v", err)
	}
	if _, err := New(Options{Lang: "go", Dir: filepath.Join(base, "my-handler")}); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Errorf("bad folder name: %v", err)
	}
	if p, err := New(Options{Lang: "go", Dir: filepath.Join(base, "my-handler"), Name: "my_handler"}); err != nil || p.Module != "my_handler.wasm" {
		t.Errorf("--name: %v", err)
	}
	if _, err := New(Options{Lang: "cobol", Dir: filepath.Join(base, "x")}); err == nil || !strings.Contains(err.Error(), "rust, tinygo, go, assemblyscript, c") {
		t.Errorf("unknown language: %v", err)
	}
	// Nothing half-written is left beside the projects.
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A typescript project pins the @pgflow/dsl this repository tests flow files with
// (testdata/dslflows): the same version and the same integrity.
func TestTheTypeScriptProjectPinsTheTestedPgflowDSL(t *testing.T) {
	type lock struct {
		Packages map[string]struct{ Version, Integrity string } `json:"packages"`
	}
	read := func(data []byte) (string, string) {
		var l lock
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		p := l.Packages["node_modules/@pgflow/dsl"]
		return p.Version, p.Integrity
	}
	tmpl, err := templates.ReadFile("templates/typescript/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	v, sum := read(tmpl)
	tv, tsum := read(readRepo(t, "testdata/dslflows/package-lock.json"))
	if v == "" || v != tv || sum != tsum {
		t.Errorf("the project pins @pgflow/dsl %s (%s), the tests %s (%s)", v, sum, tv, tsum)
	}
	pkg, err := templates.ReadFile("templates/typescript/package.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(pkg, []byte(`"@pgflow/dsl": "`+v+`"`)) {
		t.Errorf("package.json does not pin @pgflow/dsl %s exactly:\n%s", v, pkg)
	}
}
