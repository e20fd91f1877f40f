package dashboard_test

import (
	"context"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// The flows page learns each step's module as the worker loads it, a TypeScript handler
// included: the sha256 it shows is the module the worker runs.
func TestLoadModulesOfEveryLanguage(t *testing.T) {
	t.Parallel()
	f := workertest.FlowsFile(t, `
flows:
  - slug: mixed
    steps:
      - {slug: c, module: "{{greet_c}}"}
      - {slug: ts, depends_on: [c], module: "{{greet_ts}}"}
`, map[string]string{"greet_c": "modules/examples/c/greet.wasm", "greet_ts": "modules/examples/typescript/greet.ts"})
	eng := workertest.Engine(t, sandbox.EngineWazero)
	infos, err := dashboard.LoadModules(context.Background(), f, eng)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"c", "ts"} {
		info, ok := infos("mixed", step)
		if !ok || info.ABIVersion != 1 || len(info.SHA256) != 64 || info.Path != f.Flow("mixed").Step(step).Module {
			t.Errorf("step %s: %+v, %v", step, info, ok)
		}
	}
}
