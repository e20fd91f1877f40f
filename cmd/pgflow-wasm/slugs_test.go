package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Camel-case slugs, as in pgflow's own example app, are served on every pgflow release:
// pgflow.is_valid_slug takes letters of either case on each, pgmq names the queue's tables in
// lower case, and pgflow 0.17+ names the queue itself in lower case.
func TestCamelCaseSlugsRunOnEveryPgflow(t *testing.T) {
	t.Parallel()
	echo := module(t, "modules/testdata/echo.wasm")
	flows := fmt.Sprintf(`
flows:
  - slug: analyzeWebsite
    steps:
      - {slug: fetchPage, module: %[1]q}
      - {slug: summarizeText, depends_on: [fetchPage], module: %[1]q}
`, echo)
	for _, c := range []struct{ name, migrations string }{
		{"pgflow 0.8.1", filepath.Join(repoRoot(t), schema.DefaultMigrationsDir)},
		{"pgflow 0.14.1", pgtest.Pgflow014(t)},
		{"pgflow main of 2026-10-01", pgtest.PgflowMain(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t, pgtest.Empty())
			env := []string{"DATABASE_URL=" + db.URL}
			if out, errOut, code := runBinary(t, env, "db", "install", "--migrations", c.migrations); code != 0 {
				t.Fatalf("db install: exit %d\n%s%s", code, out, errOut)
			}
			path := writeFile(t, "flows.yaml", flows)
			if out, errOut, code := runBinary(t, env, "validate", "--flows", path); code != 0 {
				t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
			}
			startServe(t, db.URL, path)
			db.WaitServing(t, "analyzeWebsite")
			out, errOut, code := runBinary(t, env, "start", "analyzeWebsite", "--input", `{"value": "https://example.com"}`, "--wait", "--timeout", "1m")
			if code != 0 || !strings.Contains(out, `"summarizeText"`) {
				t.Fatalf("start --wait: exit %d, want the run's output:\n%s%s", code, out, errOut)
			}
		})
	}
}
