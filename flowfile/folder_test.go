package flowfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tempFlowsFolder is a folder of the DSL test project (so its files import the project's
// @pgflow/dsl) holding files, removed after the test.
func tempFlowsFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp(dslProject(t), "folder-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func slugsOf(f *File) string {
	var slugs []string
	for _, fl := range f.Flows {
		slugs = append(slugs, fl.Slug)
	}
	return strings.Join(slugs, " ")
}

func TestAFolderOfFlowFilesServesEveryExportedFlowWithNoCapability(t *testing.T) {
	dir := filepath.Join(dslProject(t), "supabase", "functions", "_flows")
	f, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := slugsOf(f); got != "analyze_website summarize_article squares text_processing" {
		t.Fatalf("flows %q, want every export of every file, files in name order", got)
	}
	if !f.WithoutFlowsFile {
		t.Error("a folder is not marked as served without a flows file")
	}
	aw := f.Flow("analyze_website")
	if aw.MaxAttempts != 2 || aw.Timeout != 10 || aw.BaseDelay != dslDefaultBaseDelay {
		t.Errorf("analyze_website options %d/%d/%d, want the file's", aw.MaxAttempts, aw.BaseDelay, aw.Timeout)
	}
	for _, s := range aw.Steps {
		if !s.FlowFile || s.HTTP != nil || len(s.Env) != 0 || s.SQL != nil || s.FlowsDir != "" {
			t.Errorf("step %s: %+v, want the flow file's handler, no capability, its project found from its folder", s.Slug, s)
		}
	}
	where := aw.Step("website").Where(f, aw)
	if !strings.Contains(where, "served without a flows.yaml: grant it in a flows.yaml `- flow:` entry, under `steps: {website: ...}`") ||
		!strings.Contains(where, "analyze_website.ts") {
		t.Errorf("a refused capability names the step as %q: it must say a flows.yaml grants it", where)
	}
}

func TestAFolderLeavesOutHelpersAndServesAReExportedFlowOnce(t *testing.T) {
	dir := tempFlowsFolder(t, map[string]string{
		"greet.ts":   "import { Flow } from '@pgflow/dsl';\nimport { hello } from './helper.ts';\nexport const Greet = new Flow<{ name: string }>({ slug: 'greet' })\n  .step({ slug: 'hello' }, (input) => hello(input.run.name));\n",
		"helper.ts":  "export const hello = (name: string) => 'hello ' + name;\n",
		"index.ts":   "export { Greet } from './greet.ts';\n",
		"types.d.ts": "export type X = number;\n",
	})
	f, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := slugsOf(f); got != "greet" {
		t.Fatalf("flows %q, want greet once", got)
	}
	if fl := f.Flow("greet"); !strings.HasSuffix(fl.FlowFile, "greet.ts") {
		t.Errorf("greet served from %s, want the first file in name order that exports it", fl.FlowFile)
	}
	// One file alone, as --flows greet.ts.
	one, err := Load(filepath.Join(dir, "greet.ts"))
	if err != nil || slugsOf(one) != "greet" || !one.WithoutFlowsFile {
		t.Fatalf("one flow file: %v %v", one, err)
	}
}

func TestAFolderRefusesTwoDifferentFlowsOfOneSlugAndBrokenFilesNamingTheFile(t *testing.T) {
	dir := tempFlowsFolder(t, map[string]string{
		"a.ts":     "import { Flow } from '@pgflow/dsl';\nexport default new Flow({ slug: 'same' }).step({ slug: 'x' }, () => 1);\n",
		"b.ts":     "import { Flow } from '@pgflow/dsl';\nexport default new Flow({ slug: 'same' }).step({ slug: 'y' }, () => 1);\n",
		"c.ts":     "import { Flow } from '@pgflow/dsl';\nthrow new Error('not today');\n",
		"none.ts":  "export const notAFlow = 1;\n",
		"empty.ts": "import { Flow } from '@pgflow/dsl';\nexport default new Flow({ slug: 'empty' });\n",
	})
	_, err := Load(dir)
	if err == nil {
		t.Fatal("loaded")
	}
	rel := func(name string) string { return filepath.Join(dir, name) }
	for _, want := range []string{
		rel("b.ts") + `: flow "same" is also defined by a.ts, differently`,
		rel("c.ts") + ": the handler module failed while loading: not today",
		"(c.ts:2:",
		rel("empty.ts") + `: flow "empty" of empty.ts:2 has no steps`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%s", want, err)
		}
	}
	if strings.Contains(err.Error(), "none.ts") {
		t.Errorf("a file that exports no Flow is a helper, left out of a folder: %s", err)
	}
	if _, err := Load(rel("none.ts")); err == nil || !strings.Contains(err.Error(), rel("none.ts")+": exports no Flow of @pgflow/dsl") {
		t.Errorf("one file that exports no Flow: %v", err)
	}
	empty := tempFlowsFolder(t, map[string]string{"README.md": "x"})
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "the folder holds no flow file") {
		t.Errorf("a folder without flow files: %v", err)
	}
}

// A refusal of a flow file's step names the line of its `slug:` in the file, found after its
// flow's even when the flow and the step share a slug.
func TestAFlowFileStepsRefusalNamesTheLineOfItsSlug(t *testing.T) {
	dir := tempFlowsFolder(t, map[string]string{
		"same.ts": "import { Flow } from '@pgflow/dsl';\n\nexport default new Flow({ slug: 'same' })\n" +
			"  .step({ slug: 'first' }, () => 1)\n  .step({\n    slug: 'same',\n    dependsOn: ['first'],\n    timeout: 999999,\n  }, () => 2);\n",
	})
	_, err := Load(filepath.Join(dir, "same.ts"))
	if want := `step "same" of flow "same" (same.ts:6): option timeout is 999999`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}
