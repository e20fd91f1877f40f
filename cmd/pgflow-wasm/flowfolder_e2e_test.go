package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// serve --flows takes a project's _flows folder as it is, with no flows.yaml: every Flow its
// files export is compiled and served, and a run completes with what the handlers compute.
func TestServeAFolderOfFlowFilesWithoutFlowsYAML(t *testing.T) {
	t.Parallel()
	folder := filepath.Join(repoRoot(t), "testdata", "dslflows", "supabase", "functions", "_flows")
	if _, err := os.Stat(filepath.Join(repoRoot(t), "testdata", "dslflows", "node_modules", "@pgflow", "dsl")); err != nil {
		t.Fatal("@pgflow/dsl is not installed in testdata/dslflows: run `make dsl-testdata`")
	}
	db := pgtest.NewDB(t)
	startServe(t, db.URL, folder)
	db.WaitServing(t, "text_processing")
	// Each string trimmed and lower-cased, then capitalised, then counted: the same on every
	// pgflow (a map step gets its element; summarize reads only its dependency).
	out, errOut, code := runBinary(t, []string{"DATABASE_URL=" + db.URL}, "start", "text_processing",
		"--input", `[" Hello ", "WORLD", "pgFlow"]`, "--wait", "--timeout", "2m")
	var got, want any
	_ = json.Unmarshal([]byte(`{"summarize": {"processed": 3, "results": ["Hello", "World", "Pgflow"]}}`), &want)
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("start --wait: exit %d, stdout %q, stderr %q; want %v", code, out, errOut, want)
	}
	for _, flow := range []string{"analyze_website", "summarize_article", "squares"} {
		db.WaitServing(t, flow)
	}
}

// replay reruns a failed task of a flow file's step: the file's inline handler, its failure
// reproduced; a fixed flow file given with --module succeeds.
func TestReplayAFlowFilesStep(t *testing.T) {
	t.Parallel()
	project := filepath.Join(repoRoot(t), "testdata", "dslflows")
	dir, err := os.MkdirTemp(project, "replay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	flow := func(check string) string {
		return "import { Flow } from '@pgflow/dsl';\nexport default new Flow<{ amount: number }>({ slug: 'booking', maxAttempts: 1 })\n" +
			"  .step({ slug: 'book' }, (_input, ctx: any) => {\n    " + check + "\n    return { amount: ctx.flowInput.amount };\n  });\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "booking.ts"), []byte(flow(`if (ctx.flowInput.amount > 100) throw new Error("book: amount " + ctx.flowInput.amount + " is over the limit of 100");`)), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed := filepath.Join(dir, "fixed", "booking.ts") // in the project, whose node_modules it imports
	if err := os.MkdirAll(filepath.Dir(fixed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixed, []byte(flow("")), 0o644); err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewDB(t)
	startServe(t, db.URL, dir)
	db.WaitServing(t, "booking")
	env := []string{"DATABASE_URL=" + db.URL}
	out, errOut, code := runBinary(t, env, "start", "booking", "--input", `{"amount": 500}`, "--wait", "--timeout", "1m")
	if code != 1 || !strings.Contains(errOut, "amount 500 is over the limit of 100") {
		t.Fatalf("start --wait: exit %d, %s %s; want the run to fail with the handler's error", code, out, errOut)
	}
	run := strings.Fields(errOut)[1] // "run <id> failed ..."
	out, errOut, code = runBinary(t, env, "replay", "--flows", dir, run, "book")
	if code != 1 || strings.Count(errOut, "amount 500 is over the limit of 100") != 2 || !strings.Contains(errOut, "(the failure reproduces)") {
		t.Errorf("replay: exit %d, want 1 with the recorded and the new error:\n%s%s", code, out, errOut)
	}
	out, errOut, code = runBinary(t, env, "replay", "--flows", dir, run, "book", "--module", fixed)
	if code != 0 || strings.TrimSpace(out) != `{"amount":500}` {
		t.Errorf("replay with the fixed flow file: exit %d, want its output:\n%s%s", code, out, errOut)
	}
}

// exec runs one inline handler of a flow file, the step --step names (in --flow when the
// file exports several); without one it says which steps there are.
func TestExecRunsAFlowFilesStep(t *testing.T) {
	t.Parallel()
	file := filepath.Join(repoRoot(t), "testdata", "dslflows", "supabase", "functions", "_flows", "text_maps.ts")
	out, errOut, code := runBinary(t, nil, "exec", file, "--flow", "squares", "--step", "square", "--input", "7")
	if code != 0 || strings.TrimSpace(out) != "49" {
		t.Errorf("exec --step square: exit %d, %q %q; want 49", code, out, errOut)
	}
	for args, want := range map[string]string{
		"":                              "the file exports 2 flows (squares, text_processing): say which with --flow",
		"--flow squares":                "name the step of flow \"squares\" to run with --step: numbers, square, total",
		"--flow squares --step squares": "name the step of flow \"squares\" to run with --step",
		"--flow nope --step x":          "the file exports no flow \"nope\": its flows are squares, text_processing",
	} {
		_, errOut, code := runBinary(t, nil, append([]string{"exec", file}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("exec %s: exit %d %q, want 2 and %q", args, code, errOut, want)
		}
	}
}
