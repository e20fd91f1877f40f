package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dslProjectDir is the test project of @pgflow/dsl flow files (make dsl-testdata installs its
// pinned @pgflow/dsl).
func dslProjectDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRootDir(t), "testdata", "dslflows")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@pgflow", "dsl", "package.json")); err != nil {
		t.Fatalf("@pgflow/dsl is not installed in %s: run `make dsl-testdata`", dir)
	}
	return dir
}

// module inspect takes a flow file: its Flows and steps as serve reads them, the files its one
// bundle imports, and the module every step's inline handler runs from; a Flow the worker
// would not serve as written is refused with the step's file:line.
func TestModuleInspectShowsAFlowFilesFlowsAndRefusesWithFileAndLine(t *testing.T) {
	t.Parallel()
	project := dslProjectDir(t)
	out, err := runCLI(t, "module", "inspect", "--json", filepath.Join(project, "supabase/functions/_flows/text_maps.ts"))
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	var got inspection
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !got.Accepted || got.ABIVersion != 1 || len(got.SHA256) != 64 || len(got.Flows) != 2 {
		t.Fatalf("inspect text_maps.ts: %+v", got)
	}
	var dsl bool
	for _, src := range got.Sources {
		dsl = dsl || strings.Contains(src, filepath.Join("node_modules", "@pgflow", "dsl"))
	}
	if !dsl {
		t.Errorf("sources %v: the bundle's @pgflow/dsl files are missing", got.Sources)
	}
	tp := got.Flows[1]
	if tp.Slug != "text_processing" || strings.Join(tp.Exports, ",") != "TextProcessing" || tp.BaseDelay != 1 || tp.MaxAttempts != 3 || len(tp.Steps) != 3 {
		t.Fatalf("text_processing: %+v", tp)
	}
	if c := tp.Steps[1]; c.Slug != "capitalize" || c.Type != "map" || strings.Join(c.DependsOn, ",") != "normalize" || c.MaxAttempts == nil || *c.MaxAttempts != 4 || c.Timeout != nil {
		t.Errorf("capitalize: %+v", c)
	}

	text, err := runCLI(t, "module", "inspect", filepath.Join(project, "supabase/functions/_flows/text_maps.ts"))
	if err != nil || !strings.Contains(text, "capitalize  map     depends on normalize   options maxAttempts 4") {
		t.Errorf("inspect's text (%v):\n%s", err, text)
	}

	dir, err := os.MkdirTemp(project, "inspect-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bad := filepath.Join(dir, "bad.ts")
	if err := os.WriteFile(bad, []byte("import { Flow } from '@pgflow/dsl';\n\nexport default new Flow({ slug: 'bad' })\n"+
		"  .step({ slug: 'ok' }, () => 1)\n  .step({ slug: 'slow', dependsOn: ['ok'], timeout: 999999 }, () => 2);\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, "module", "inspect", bad)
	if want := `step "slow" of flow "bad" (bad.ts:5): option timeout is 999999: it must be a whole number from 1 to 86400`; inspectExit(err) != 1 || !strings.Contains(out, want) {
		t.Errorf("exit %d, output:\n%s\nwant exit 1 and %q", inspectExit(err), out, want)
	}
}

// validate and serve take a folder of flow files, or one flow file, without a flows.yaml.
func TestValidateAFolderOfFlowFiles(t *testing.T) {
	t.Parallel()
	folder := filepath.Join(dslProjectDir(t), "supabase/functions/_flows")
	out, err := runCLI(t, "validate", "--flows", folder)
	if err != nil || !strings.Contains(out, folder+": ok (4 flows, 14 steps") {
		t.Errorf("validate a folder (%v):\n%s", err, out)
	}
}

// module test runs a flow file's cases on the inline handlers of the steps they name, each
// one task through the sandbox; a case naming no step, a step the flow lacks, or deps other
// than the step's dependencies is a usage error saying what to write.
func TestModuleTestRunsAFlowFilesInlineHandlers(t *testing.T) {
	t.Parallel()
	project := dslProjectDir(t)
	file := filepath.Join(project, "supabase/functions/_flows/text_maps.ts")
	dir, err := os.MkdirTemp(project, "cases-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := write("text_maps.test.json", `{"cases": [
  {"name": "trims and lowers", "flow": "text_processing", "step": "normalize", "element": " Hello ", "output": "hello"},
  {"name": "capitalises", "flow": "text_processing", "step": "capitalize", "element": "world", "task_index": 1, "output": "World"},
  {"name": "counts", "flow": "text_processing", "step": "summarize", "deps": {"capitalize": ["A", "B"]}, "output": {"processed": 2, "results": ["A", "B"]}},
  {"name": "keeps finite numbers", "pgflow_version": "0.8", "flow": "squares", "step": "numbers", "flow_input": {"numbers": [1, "x", 3]}, "output": [1, 3]},
  {"name": "wrong on purpose", "flow": "squares", "step": "square", "element": 3, "output": 6}
]}`)
	out, err := runCLI(t, "module", "test", file, cases)
	if inspectExit(err) != 1 {
		t.Fatalf("exit %d (%v), want 1\n%s", inspectExit(err), err, out)
	}
	for _, want := range []string{"ok    trims and lowers (", "ok    capitalises (", "ok    counts (", "ok    keeps finite numbers (",
		"FAIL  wrong on purpose: want the output 6, got 9", "4 of 5 cases passed (wazero)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for text, want := range map[string]string{
		`{"name": "n", "step": "normalize", "element": "x", "output": "x"}`:                        `case "n": the file exports 2 flows (squares, text_processing): say which with "flow"`,
		`{"name": "n", "flow": "squares", "element": "x", "output": "x"}`:                          `case "n": name the step of flow "squares" the case runs with "step": numbers, square, total`,
		`{"name": "n", "flow": "squares", "step": "sum", "output": 1}`:                             `case "n": flow "squares" has no step "sum": its steps are numbers, square, total`,
		`{"name": "n", "flow": "squares", "step": "total", "deps": {"numbers": [1]}, "output": 1}`: `case "n": step "total" depends on [square]: "deps" must give exactly their outputs, not [numbers]`,
		`{"name": "n", "flow": "squares", "step": "square", "output": 1}`:                          `case "n": step "square" is a map step: give the task's "element"`,
	} {
		out, err := runCLI(t, "module", "test", file, write("bad.test.json", `{"cases": [`+text+`]}`))
		if inspectExit(err) != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: exit %d (%v), want 2 and %q\n%s", text, inspectExit(err), err, want, out)
		}
	}
}

// An inline handler's error names its file and line, and only frames the user wrote: not the
// entry pgflow-wasm bundles a flow file behind.
func TestAnInlineHandlersErrorNamesItsLineAndNoFrameOfOurs(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp(dslProjectDir(t), "thrower-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "thrower.ts")
	if err := os.WriteFile(file, []byte("import { Flow } from '@pgflow/dsl';\n\nexport default new Flow({ slug: 'thrower' })\n"+
		"  .step({ slug: 'boom' }, () => {\n    throw new Error('boom on purpose');\n  });\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "exec", file, "--step", "boom", "--input", `{"run": {}}`)
	msg := out
	if err != nil {
		msg += err.Error()
	}
	if err == nil || !strings.Contains(msg, "boom on purpose") || !strings.Contains(msg, "(thrower.ts:5:") || strings.Contains(msg, "flow-entry") {
		t.Errorf("exec of a throwing inline handler (%v):\n%s", err, msg)
	}
}
