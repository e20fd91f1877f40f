package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// repoRoot is the repository root, found from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// testModule returns the path of a module built by `make sandbox-testdata`, failing the
// test (not skipping it) when it is missing.
func testModule(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(repoRoot(), "sandbox", "testdata", "build", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test module %s is missing: run `make sandbox-testdata` (%v)", p, err)
	}
	return p
}

// exampleModule returns the path of an example built by `make examples`.
func exampleModule(t testing.TB, lang, name string) string {
	t.Helper()
	p := filepath.Join(repoRoot(), "modules", "examples", lang, name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("example module %s is missing: run `make examples` (%v)", p, err)
	}
	return p
}

// newEngine creates an engine that is closed when the test ends.
func newEngine(t testing.TB, name string, cfg sandbox.Config) sandbox.Engine {
	t.Helper()
	e, err := sandbox.New(name, cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// load loads a module that must be accepted; it is closed when the test ends.
func load(t testing.TB, e sandbox.Engine, path string, mc sandbox.ModuleConfig) sandbox.Module {
	t.Helper()
	m, err := e.Load(context.Background(), path, mc)
	if err != nil {
		t.Fatalf("%s: Load(%s): %v", e.Name(), filepath.Base(path), err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// forEachEngine runs f once per engine in this build (wazero, and wasmtime with -tags wasmtime).
func forEachEngine(t *testing.T, f func(t *testing.T, engine string)) {
	for _, name := range sandbox.Engines() {
		t.Run(name, func(t *testing.T) { f(t, name) })
	}
}

var testContext = []byte(`{"run_id":"00000000-0000-0000-0000-000000000001","flow_slug":"f","step_slug":"s","task_index":0,"attempt":1,"msg_id":7,"flow_input":{"x":1},"worker_id":"00000000-0000-0000-0000-000000000002","timeout_ms":5000}`)

// testSeed is a task identity for reproducible random bytes.
var testSeed = []byte("run 1/step s/task 0")

func task(input string, timeout time.Duration) sandbox.Task {
	return sandbox.Task{Input: []byte(input), Context: testContext, Timeout: timeout}
}

// wantKind asserts err is a *sandbox.Error of kind k whose message contains every part.
func wantKind(t testing.TB, err error, k sandbox.Kind, parts ...string) {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) {
		t.Fatalf("want a %s *sandbox.Error, got %T: %v", k, err, err)
	}
	if se.Kind != k {
		t.Fatalf("want kind %s, got %s: %s", k, se.Kind, se.Message)
	}
	for _, p := range parts {
		if !strings.Contains(se.Message, p) {
			t.Errorf("%s message %q does not contain %q", k, se.Message, p)
		}
	}
}

// runEcho checks that the engine still runs a good module correctly.
func runEcho(t testing.TB, e sandbox.Engine) {
	t.Helper()
	m := load(t, e, testModule(t, "echo"), sandbox.ModuleConfig{})
	in := `{"still":"healthy","n":[1,2,3]}`
	res, err := m.Run(context.Background(), task(in, 5*time.Second))
	if err != nil {
		t.Fatalf("%s: the good module failed after a bad one: %v", e.Name(), err)
	}
	if string(res.Output) != in {
		t.Fatalf("%s: echo output %s, want %s", e.Name(), res.Output, in)
	}
}
