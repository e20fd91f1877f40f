package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles writes name -> content into a new folder and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// validate bundles every TypeScript handler and reports syntax and import errors at their
// file, line and column, beside the step's flows.yaml line; good handlers pass.
func TestValidateTypeScriptHandlers(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{
		"flows.yaml": `flows:
  - slug: shop
    steps:
      - slug: price
        module: handlers/price.ts
      - slug: total
        depends_on: [price]
        module: handlers/total.ts
      - slug: notify
        depends_on: [total]
        module: handlers/notify.js
`,
		"handlers/price.ts":     "import { round } from './lib/money';\nexport default async (input: { run: { cents: number } }) => ({ price: round(input.run.cents) });\n",
		"handlers/lib/money.ts": "export const round = (c: number): number => Math.round(c) / 100;\n",
		"handlers/total.ts":     "export default async function handler(input: { price: { price: number } }) {\n  const total = input.price.price *;\n  return { total };\n}\n",
		"handlers/notify.js":    "import { send } from './mailer';\nexport default async () => send();\n",
	})
	flows := filepath.Join(dir, "flows.yaml")
	out, err := runCLI(t, "validate", "--flows", flows, "--verbose")
	if inspectExit(err) != 2 {
		t.Fatalf("exit %d (%v), want 2\n%s", inspectExit(err), err, out)
	}
	for _, want := range []string{
		"shop/price\t" + filepath.Join(dir, "handlers/price.ts") + "\tsha256 ",
		flows + `:8: flow "shop" step "total": invalid_module: ` + filepath.Join(dir, "handlers/total.ts") + " does not build:\ntotal.ts:2:36: Unexpected \";\"\n      const total = input.price.price *;",
		flows + `:11: flow "shop" step "notify": invalid_module: `,
		`notify.js:1:22: Could not resolve "./mailer"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "2 of 3 steps have a module wazero refuses") {
		t.Errorf("summary: %q", msg)
	}
}

// module inspect takes a TypeScript handler: the module the worker would run (a snapshot of
// the engine with the handler in it), the files it imports, or why it is refused.
func TestModuleInspectTypeScript(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{
		"h.ts":      "import { twice } from './util';\nexport default async (n: number) => twice(n);\n",
		"util.ts":   "export const twice = (n: number) => 2 * n;\n",
		"bad.ts":    "export default async () => { return 1 +; };\n",
		"thrown.ts": "throw new Error('configuration missing');\nexport default async () => 1;\n",
	})
	out, err := runCLI(t, "module", "inspect", "--json", filepath.Join(dir, "h.ts"))
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	var got inspection
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !got.Accepted || got.ABIVersion != 1 || got.Mode != "reactor" || len(got.SHA256) != 64 ||
		fmt.Sprint(got.Sources) != fmt.Sprint([]string{filepath.Join(dir, "util.ts")}) {
		t.Errorf("inspect h.ts: %+v", got)
	}
	for file, want := range map[string]string{
		"bad.ts":    "accepted: no (" + filepath.Join(dir, "bad.ts") + " does not build:\nbad.ts:1:40: Unexpected \";\"",
		"thrown.ts": "accepted: no (the handler module failed while loading: configuration missing\n    at <anonymous> (thrown.ts:1:",
	} {
		out, err := runCLI(t, "module", "inspect", filepath.Join(dir, file))
		if inspectExit(err) != 1 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d, output:\n%s\nwant exit 1 and %q", file, inspectExit(err), out, want)
		}
	}
	out, err = runCLI(t, "module", "inspect", filepath.Join(dir, "missing.ts"))
	if inspectExit(err) != 2 || !strings.Contains(err.Error(), "cannot read") {
		t.Errorf("missing file: exit %d, %v\n%s", inspectExit(err), err, out)
	}
}

// module test runs each case as one task through the sandbox: a flow input, dependencies'
// outputs, a map element, granted env values (an ungranted one is undefined, as in pgflow's
// ctx.env); a failing case says why and exits 1.
func TestModuleTestRunsCases(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{
		"h.ts": `export default async (input: any, ctx: any) => {
  console.log("task", ctx.stepTask.task_index);
  if (ctx.stepTask.task_index > 0) return { element: input };
  if (input.price !== undefined) return { total: input.price * 2, token: ctx.env.TOKEN };
  return { root: input };
};
`,
		"h.test.json": `{"cases": [
  {"name": "root", "flow_input": {"n": 1}, "output": {"root": {"n": 1}}},
  {"name": "root before 0.12", "pgflow_version": "0.8", "flow_input": {"n": 1}, "output": {"root": {"run": {"n": 1}}}},
  {"name": "dependent", "deps": {"price": 21}, "env": {"TOKEN": "t"}, "output": {"total": 42, "token": "t"}},
  {"name": "map", "element": "x", "task_index": 3, "output": {"element": "x"}, "logs": ["task 3"]},
  {"name": "wrong on purpose", "flow_input": 1, "output": {"root": 2}},
  {"name": "ungranted", "deps": {"price": 1}, "output": {"total": 2}}
]}`,
	})
	out, err := runCLI(t, "module", "test", filepath.Join(dir, "h.ts"))
	if inspectExit(err) != 1 {
		t.Fatalf("exit %d (%v), want 1\n%s", inspectExit(err), err, out)
	}
	for _, want := range []string{"ok    root (", "ok    root before 0.12 (", "ok    dependent (", "ok    map (", "ok    ungranted (",
		`FAIL  wrong on purpose: want the output {"root": 2}, got {"root":1}`, "5 of 6 cases passed (wazero)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// validate refuses a TypeScript handler that imports a file outside its project (the flows
// file's folder): the worker's environment, /etc/passwd, a file beside the project, a
// symlink out of it. Each is named at its import's line, and the file's content is not shown.
func TestValidateRefusesImportsOutsideTheProject(t *testing.T) {
	t.Parallel()
	const secret = "beside-the-project-5e2a"
	base := writeFiles(t, map[string]string{
		"secret.txt": secret,
		"proj/flows.yaml": `flows:
  - slug: leak
    steps:
      - slug: env
        module: handlers/env.ts
      - slug: passwd
        module: handlers/passwd.ts
      - slug: parent
        module: handlers/parent.ts
      - slug: link
        module: handlers/link.ts
      - slug: fine
        module: handlers/fine.ts
`,
		"proj/handlers/env.ts":    "import env from \"/proc/self/environ\" with { type: \"text\" };\nexport default async () => env;\n",
		"proj/handlers/passwd.ts": "// the machine's users\nimport pw from \"/etc/passwd\" with { type: \"text\" };\nexport default async () => pw;\n",
		"proj/handlers/parent.ts": "import s from \"../../secret.txt\" with { type: \"text\" };\nexport default async () => s;\n",
		"proj/handlers/link.ts":   "import s from \"../data/link.txt\" with { type: \"text\" };\nexport default async () => s;\n",
		"proj/handlers/fine.ts":   "import words from \"../data/words.txt\" with { type: \"text\" };\nexport default async () => words;\n",
		"proj/data/words.txt":     "hello",
	})
	if err := os.Symlink("../../secret.txt", filepath.Join(base, "proj/data/link.txt")); err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(base, "proj")
	flows := filepath.Join(proj, "flows.yaml")
	out, err := runCLI(t, "validate", "--flows", flows, "--verbose")
	if inspectExit(err) != 2 {
		t.Fatalf("exit %d (%v), want 2\n%s", inspectExit(err), err, out)
	}
	rule := " refused: a handler may import only files of its own project (" + proj + ") and its node_modules; "
	for _, want := range []string{
		flows + `:5: flow "leak" step "env": invalid_module: `,
		`env.ts:1:17: import of "/proc/self/environ"` + rule + "/proc belongs to the worker",
		`passwd.ts:2:16: import of "/etc/passwd"` + rule + "it is an absolute path",
		`parent.ts:1:15: import of "../../secret.txt"` + rule + filepath.Join(base, "secret.txt") + " is outside the project",
		`link.ts:1:15: import of "../data/link.txt"` + rule + filepath.Join(proj, "data/link.txt") + " leads through a symlink to " + filepath.Join(base, "secret.txt"),
		"leak/fine\t" + filepath.Join(proj, "handlers/fine.ts") + "\tsha256 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, secret) || strings.Contains(out, "root:") {
		t.Errorf("the output shows a refused file's content:\n%s", out)
	}
	if msg := err.Error(); !strings.Contains(msg, "4 of 5 steps have a module wazero refuses") {
		t.Errorf("summary: %q", msg)
	}
}
