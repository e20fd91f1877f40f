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
