package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// validate (and the dashboard, and module inspect) once loaded a step's module without its
// fuel, so on wasmtime they checked other code than serve ran: every command now maps a
// step to its module's configuration through flowfile.Step.ModuleConfig.
func TestValidateCompilesWhatServeRuns(t *testing.T) {
	t.Parallel()
	if e, err := sandbox.New(sandbox.EngineWasmtime, sandbox.Config{}); err != nil {
		t.Skipf("wasmtime is not built in (go test -tags wasmtime): %v", err)
	} else {
		e.Close(t.Context())
	}
	db := pgtest.NewDB(t)
	f := workertest.FlowsFile(t, `
flows:
  - slug: fueled
    steps:
      - {slug: metered, fuel: 1000000, module: "{{echo}}"}
      - {slug: plain, depends_on: [metered], module: "{{echo}}"}
`, map[string]string{"echo": "modules/testdata/echo.wasm"})
	w := workertest.StartWorker(t, db.Pool, f, worker.Config{Engine: workertest.Engine(t, sandbox.EngineWasmtime)})
	<-w.Started()
	out, err := runCLI(t, "validate", "--engine", sandbox.EngineWasmtime, "--verbose", "--flows", f.Path)
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	for _, step := range []string{"metered", "plain"} {
		served, ok := w.ModuleInfo("fueled", step)
		if !ok {
			t.Fatalf("the worker serves no step %s", step)
		}
		want := fmt.Sprintf("fueled/%s\t%s\tsha256 %s\t%s", step, served.Path, served.SHA256[:12], served.Compilation)
		if !strings.Contains(out, want+"\n") {
			t.Errorf("validate -v lacks the line of the code serve runs:\n%q\nin:\n%s", want, out)
		}
	}
	if m, _ := w.ModuleInfo("fueled", "metered"); !strings.Contains(m.Compilation, "fuel metered") {
		t.Errorf("the fueled step compiles as %q, want fuel metering", m.Compilation)
	}
}

// validate checks a file with external steps as serve and compile --dry-run take it: the
// steps this worker serves have their modules loaded, an external one has none to load.
func TestValidateAcceptsExternalSteps(t *testing.T) {
	t.Parallel()
	f := workertest.FlowsFile(t, `
flows:
  - slug: mixed
    steps:
      - {slug: fetchPage, module: "{{echo}}"}
      - {slug: summarize, external: true, depends_on: [fetchPage]}
      - {slug: store, depends_on: [summarize], module: "{{echo}}"}
`, map[string]string{"echo": "modules/testdata/echo.wasm"})
	out, err := runCLI(t, "validate", "--verbose", "--flows", f.Path)
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	for _, want := range []string{"mixed/summarize\texternal: served by another worker\n", "mixed/store\t", "ok (1 flows, 3 steps", "1 served by another worker"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate -v lacks %q:\n%s", want, out)
		}
	}
}
