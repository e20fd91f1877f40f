package sandbox_test

import (
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Every refused import is named in one message, with a hint for the known ones; the
// imports the host provides are not mentioned.
func TestEveryForbiddenImportIsNamedWithItsHint(t *testing.T) {
	t.Parallel()
	_, err := sandbox.Inspect(testModule(t, "forbidden_imports"), sandbox.Config{}, sandbox.ModuleConfig{})
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		"4 imports are refused (modules may import only pgflow.* and wasi_snapshot_preview1.*):",
		"env.seed (AssemblyScript's Math.random",
		"env.Date.now (AssemblyScript's Date.now",
		"env.console.log (AssemblyScript's console.log",
		"pgflow.http_get is not part of ABI v1",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "pgflow.log") {
		t.Errorf("a provided import is named:\n%s", msg)
	}
}
