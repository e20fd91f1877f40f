package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
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
