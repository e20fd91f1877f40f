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
