package flowfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dslProject is the test project of @pgflow/dsl flow files (make dsl-testdata installs its
// pinned @pgflow/dsl).
func dslProject(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../testdata/dslflows")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@pgflow", "dsl", "package.json")); err != nil {
		t.Fatalf("@pgflow/dsl is not installed in %s: run `make dsl-testdata`", dir)
	}
	return dir
}

func loadText(t *testing.T, dir, text string) (*File, error) {
	t.Helper()
	path := filepath.Join(dir, "flows-test.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	return Load(path)
}

func TestAFlowFileEntryServesEveryFlowTheFileExportsWithItsShape(t *testing.T) {
	dir := dslProject(t)
	f, err := Load(filepath.Join(dir, "flows.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for _, fl := range f.Flows {
		slugs = append(slugs, fl.Slug)
	}
	if got := strings.Join(slugs, " "); got != "analyze_website squares text_processing" {
		t.Fatalf("flows %q, want analyze_website squares text_processing (the exports, named ones by name)", got)
	}
	aw := f.Flow("analyze_website")
	if aw.MaxAttempts != 2 || aw.Timeout != 10 || aw.BaseDelay != dslDefaultBaseDelay {
		t.Errorf("analyze_website options %d/%d/%d, want 2/%d/10 (base delay left to create_flow)", aw.MaxAttempts, aw.BaseDelay, aw.Timeout, dslDefaultBaseDelay)
	}
	if !strings.HasSuffix(aw.FlowFile, "_flows/analyze_website.ts") {
		t.Errorf("FlowFile %q", aw.FlowFile)
	}
	var shape []string
	for _, s := range aw.Steps {
		shape = append(shape, s.Slug+"<"+strings.Join(s.DependsOn, ",")+">")
		if !s.FlowFile || s.Module != aw.FlowFile {
			t.Errorf("step %s: module %q FlowFile %v, want the flow file's handler", s.Slug, s.Module, s.FlowFile)
		}
	}
	if got := strings.Join(shape, " "); got != "website<> sentiment<website> summary<website> saveToDb<sentiment,summary>" {
		t.Errorf("steps %s", got)
	}
	if s := aw.Step("sentiment"); s.Timeout == nil || *s.Timeout != 30 || s.MaxAttempts == nil || *s.MaxAttempts != 5 || s.BaseDelay != nil {
		t.Errorf("sentiment's options: %+v", s)
	}
	if s := aw.Step("saveToDb"); s.StartDelay == nil || *s.StartDelay != 0 {
		t.Errorf("saveToDb's start delay: %v", s.StartDelay)
	}
	if s := aw.Step("website"); s.MemoryLimit != 32<<20 {
		t.Errorf("website's memory limit from flows.yaml: %d", s.MemoryLimit)
	}
	tp := f.Flow("text_processing")
	if tp.Step("normalize").Type != StepMap || tp.Step("capitalize").Type != StepMap || tp.Step("summarize").Type != StepSingle {
		t.Error("text_processing's map steps are not maps")
	}
	if d := tp.Step("capitalize").DependsOn; len(d) != 1 || d[0] != "normalize" {
		t.Errorf("capitalize depends on %v, want its array normalize", d)
	}
	if sq := f.Flow("squares"); sq.Step("numbers").Type != StepSingle || sq.Step("square").Type != StepMap {
		t.Error("an array step is a single step in pgflow; a map over it a map")
	}
}

func TestAFlowFileEntryRefusesWhatTheFileOwnsAndKeysNamingNoStepWithTheirLines(t *testing.T) {
	dir := dslProject(t)
	_, err := loadText(t, dir, `flows:
  - flow: supabase/functions/_flows/analyze_website.ts
    timeout: 5
    steps:
      website:
        http: {allow: ["example.com"]}
      sumary:
        memory_limit: 1MiB
      summary:
        depends_on: [website]
  - flow: supabase/functions/_flows/missing.ts
`)
	if err == nil {
		t.Fatal("loaded")
	}
	msg := err.Error()
	for _, want := range []string{
		"flows-test.yaml:3: `timeout` of a flow file's flow is the file's own",
		`flows-test.yaml:7: step "sumary" is not a step of flow "analyze_website" (supabase/functions/_flows/analyze_website.ts) (did you mean "summary"?)`,
		`flows-test.yaml:10: unknown key "depends_on" for step "summary"`,
		`flows-test.yaml:11: flow file "supabase/functions/_flows/missing.ts" not found`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
}

func TestAFlowFileThatThrowsOrExportsNoFlowIsRefusedAtItsLine(t *testing.T) {
	dir := dslProject(t)
	sub := filepath.Join(dir, "broken")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sub) })
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(sub, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dup.ts", "import { Flow } from '@pgflow/dsl';\nexport default new Flow({ slug: 'dup' })\n  .step({ slug: 'a' }, () => 1)\n  .step({ slug: 'a' }, () => 2);\n")
	write("none.ts", "export const notAFlow = { slug: 'x' };\n")
	write("external.ts", "import { Flow } from '@pgflow/dsl';\nexport default new Flow({ slug: 'all_external' }).step({ slug: 'only' }, () => 1);\n")
	_, err := loadText(t, dir, `flows:
  - flow: broken/dup.ts
  - flow: broken/none.ts
  - flow: broken/external.ts
    steps:
      only: {external: true, memory_limit: 1MiB}
`)
	if err == nil {
		t.Fatal("loaded")
	}
	msg := err.Error()
	for _, want := range []string{
		`flows-test.yaml:2: flow file broken/dup.ts: the handler module failed while loading: Step "a" already exists in flow "dup"`,
		"(dup.ts:4:4)",
		"flows-test.yaml:3: flow file broken/none.ts exports no Flow of @pgflow/dsl",
		"every step of flow \"all_external\" is `external: true`",
		"is `external: true` (served by another worker): it takes no `memory_limit`",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
}
