package scaffold_test

// What a user does with a new project, for every language, with the real binary and the
// real toolchains, in a temporary folder outside the repository: pgflow-wasm new, make,
// make test (the skeleton's unit tests), validate, serve, start --wait; the run completes
// with the skeleton's output.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/scaffold"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/testbin"
)

// TestMain removes the binary pgflowWasm built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// pgflowWasm builds the binary once for every test of this package.
func pgflowWasm(t *testing.T) string {
	t.Helper()
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// makeEnv is the environment of a project's make: without the make variables of a make
// that may be running this test, so the project's make is on its own.
func makeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// run runs a command in dir and returns its combined output, failing the test on error.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, makeEnv()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// projectsEnv turns on TestNewProjectsBuildTestAndRun (make test sets it).
const projectsEnv = "PGFLOW_WASM_TEST_PROJECTS"

// builds limits how many projects build at once: toolchains are CPU-bound.
var builds = make(chan struct{}, 2)

func TestNewProjectsBuildTestAndRun(t *testing.T) {
	if os.Getenv(projectsEnv) == "" {
		t.Skipf("builds a project in every language with its real toolchain (2-4 minutes of both cores): "+
			"make test runs it in a step of its own, with %s=1, so its builds do not slow the timing tests of other packages", projectsEnv)
	}
	bin := pgflowWasm(t)
	db := pgtest.NewDB(t)
	for _, lang := range scaffold.Languages {
		t.Run(lang.Name, func(t *testing.T) {
			t.Parallel()
			// os.MkdirTemp, not t.TempDir: outside the repository for sure, under $TMPDIR.
			base, err := os.MkdirTemp("", "pgflow-wasm-new-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if !t.Failed() {
					os.RemoveAll(base)
				} else {
					t.Logf("project kept in %s", base)
				}
			})
			name := "hello_" + lang.Name
			dir := filepath.Join(base, name)
			out := run(t, base, bin, "new", lang.Name, name)
			article := "a "
			if strings.ContainsRune("AEIOU", rune(lang.Title[0])) {
				article = "an " // an AssemblyScript handler
			}
			if !strings.Contains(out, "created "+name+": "+article+lang.Title+" handler named "+name) {
				t.Fatalf("new said:\n%s", out)
			}

			func() {
				builds <- struct{}{}
				defer func() { <-builds }()
				// PGFLOW_WASM: the TypeScript project's make runs pgflow-wasm itself.
				run(t, dir, "make", "PGFLOW_WASM="+bin)
				out = run(t, dir, "make", "test", "PGFLOW_WASM="+bin)
			}()
			t.Logf("make test:\n%s", lastLines(out, 6))
			if _, err := os.Stat(filepath.Join(dir, lang.ModuleFile(name))); err != nil {
				t.Fatalf("make built no module: %v", err)
			}

			out = run(t, dir, bin, "validate")
			if !strings.Contains(out, "flows.yaml: ok (1 flows, 1 steps") {
				t.Fatalf("validate said:\n%s", out)
			}
			serveAndStart(t, bin, dir, db, name)
		})
	}
}

// serveAndStart runs `serve` in the project folder, then `start --wait`, and checks the run's output.
func serveAndStart(t *testing.T, bin, dir string, db *pgtest.DB, name string) {
	t.Helper()
	var log bytes.Buffer
	serve := exec.Command(bin, "serve", "--database-url", db.URL, "--log-format", "text",
		"--min-poll-interval", "20ms", "--max-poll-interval", "200ms")
	serve.Dir, serve.Stdout, serve.Stderr = dir, &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = serve.Process.Kill()
			_ = serve.Wait()
			t.Logf("serve log:\n%s", log.String())
		}
	})
	db.WaitServing(t, name)

	start := exec.Command(bin, "start", name, "--input", `{"name": "Ada"}`, "--wait", "--timeout", "2m", "--database-url", db.URL)
	start.Dir = dir
	var stderr bytes.Buffer
	start.Stderr = &stderr
	out, err := start.Output()
	if err != nil {
		t.Fatalf("start --wait: %v\n%s%s", err, out, stderr.String())
	}
	var got map[string]map[string]string
	if err := json.Unmarshal(out, &got); err != nil || got[name]["greeting"] != "Hello, Ada!" {
		t.Fatalf("start --wait printed %s (%v); stderr: %s", out, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "completed in") {
		t.Errorf("start --wait said on stderr: %s", stderr.String())
	}

	_ = serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Errorf("serve did not stop cleanly on SIGTERM: %v\n%s", err, log.String())
	}
	stopped = true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
