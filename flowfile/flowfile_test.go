package flowfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFlows writes a flows file and the module files it names (empty: this package only
// checks that they exist; the sandbox validates their contents).
func writeFlows(t *testing.T, yamlText string, modules ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range modules {
		p := filepath.Join(dir, m)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("\x00asm"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "flows.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadValidFile(t *testing.T) {
	t.Parallel()
	path := writeFlows(t, `
flows:
  - slug: order_pipeline
    max_attempts: 5
    base_delay: 2
    timeout: 30
    max_concurrency: 4
    steps:
      - slug: total
        depends_on: [price_items]
        module: m/sum.wasm
      - slug: validate
        module: m/validate.wasm
        reuse_instance: true
        deterministic: true
        fuel: 5000000
      - slug: price_items
        type: map
        depends_on: [validate]
        module: m/price.wasm
        timeout: 5
        memory_limit: 32MiB
        start_delay: 0
  - slug: second
    steps:
      - slug: only
        module: m/sum.wasm
`, "m/sum.wasm", "m/validate.wasm", "m/price.wasm")
	f, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(f.Flows) != 2 {
		t.Fatalf("got %d flows, want 2", len(f.Flows))
	}
	fl := f.Flow("order_pipeline")
	if fl.MaxAttempts != 5 || fl.BaseDelay != 2 || fl.Timeout != 30 || fl.MaxConcurrency != 4 {
		t.Errorf("flow options = %+v", fl)
	}
	var order []string
	for _, s := range fl.Steps {
		order = append(order, s.Slug)
	}
	if got := strings.Join(order, ","); got != "validate,price_items,total" {
		t.Errorf("topological order = %s, want validate,price_items,total", got)
	}
	price := fl.Step("price_items")
	if price.Type != StepMap || price.MemoryLimit != 32<<20 || *price.Timeout != 5 || price.EffectiveTimeout(fl) != 5 || price.Deterministic || price.Fuel != 0 {
		t.Errorf("price_items = %+v", price)
	}
	if !filepath.IsAbs(price.Module) || !strings.HasSuffix(price.Module, "m/price.wasm") {
		t.Errorf("module path %q should be absolute and resolved against the file's folder", price.Module)
	}
	if v := fl.Step("validate"); !v.ReuseInstance || v.Timeout != nil || v.EffectiveTimeout(fl) != 30 || !v.Deterministic || v.Fuel != 5_000_000 {
		t.Errorf("validate = %+v", v)
	}
	if got := fl.Dependents("validate"); len(got) != 1 || got[0] != "price_items" {
		t.Errorf("Dependents(validate) = %v", got)
	}
	second := f.Flow("second")
	if second.MaxAttempts != DefaultMaxAttempts || second.BaseDelay != DefaultBaseDelay || second.Timeout != DefaultTimeout {
		t.Errorf("defaults not applied: %+v", second)
	}
}

func TestLoadReportsProblemsWithLines(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		yaml string
		want []string // substrings, each expected somewhere in the error
	}{
		{"syntax", "flows:\n  - slug: a: b\n", []string{"flows.yaml:2: invalid YAML: mapping values are not allowed"}},
		// yaml.v3 names an earlier line for these; the error points at the culprit.
		{"unclosed brace", "flows:\n  - slug: a\n    steps:\n      - {slug: x, module: m.wasm\n      - slug: y\n",
			[]string{"flows.yaml:4: invalid YAML: did not find expected ',' or '}' (a { ... } that starts here is not closed"}},
		{"unclosed bracket", "flows:\n  - slug: a\n    steps:\n      - slug: x\n        module: m.wasm\n        depends_on: [y\n      - slug: y\n",
			[]string{"flows.yaml:6: invalid YAML: did not find expected ',' or ']'"}},
		{"bad indent", "flows:\n  - slug: a\n    steps:\n      - slug: x\n        module: m.wasm\n     timeout: 5\n",
			[]string{"flows.yaml:6: invalid YAML: did not find expected key (this line is indented differently"}},
		{"tab", "flows:\n  - slug: a\n    steps:\n      - slug: x\n\tmodule: m.wasm\n",
			[]string{"flows.yaml:5: invalid YAML: found a tab character"}},
		{"empty", "", []string{"the file is empty"}},
		{"no flows key", "flow: []\n", []string{`flows.yaml:1: unknown key "flow" at the top level (did you mean "flows"?)`, "missing `flows:`"}},
		{"flows not a list", "flows: {}\n", []string{"flows.yaml:1: `flows` must be a list"}},
		{"unknown flow key", `
flows:
  - slug: a
    timout: 3
    steps:
      - slug: s
        module: m.wasm
`, []string{`flows.yaml:4: unknown key "timout" in flow "a" (did you mean "timeout"?)`}},
		{"unknown step key", `
flows:
  - slug: a
    steps:
      - slug: s
        module: m.wasm
        dependson: [x]
`, []string{`flows.yaml:7: unknown key "dependson" in step "s" of flow "a" (did you mean "depends_on"?)`}},
		{"bad flow slug", `
flows:
  - slug: Order-Pipeline
    steps:
      - slug: s
        module: m.wasm
`, []string{`flows.yaml:3: flow slug "Order-Pipeline": use letters, digits and _`, `"Order_Pipeline"`}},
		{"flow slugs differing in case", "flows:\n  - slug: analyzeWebsite\n    steps:\n      - {slug: s, module: m.wasm}\n  - slug: analyzewebsite\n    steps:\n      - {slug: s, module: m.wasm}\n",
			[]string{`flows.yaml:5: flow "analyzewebsite" differs from flow "analyzeWebsite" (line 2) only in case: they would share one pgmq queue`}},
		{"long flow slug", "flows:\n  - slug: " + strings.Repeat("a", 48) + "\n    steps:\n      - slug: s\n        module: m.wasm\n",
			[]string{"flows.yaml:2:", "is 48 characters: at most 47"}},
		{"reserved step slug", `
flows:
  - slug: a
    steps:
      - slug: run
        module: m.wasm
`, []string{"flows.yaml:5: `run` is reserved"}},
		{"duplicate step", `
flows:
  - slug: a
    steps:
      - slug: s
        module: m.wasm
      - slug: s
        module: m.wasm
`, []string{`flows.yaml:7: step "s" is declared twice in flow "a" (first at line 5)`}},
		{"duplicate flow", `
flows:
  - slug: a
    steps: [{slug: s, module: m.wasm}]
  - slug: a
    steps: [{slug: s, module: m.wasm}]
`, []string{`flows.yaml:5: flow "a" is declared twice (first at line 3)`}},
		{"missing dep", `
flows:
  - slug: a
    steps:
      - slug: first
        module: m.wasm
      - slug: second
        depends_on: [frist]
        module: m.wasm
`, []string{`flows.yaml:7: step "second" depends on "frist", which flow "a" does not declare (did you mean "first"?)`}},
		{"cycle", `
flows:
  - slug: a
    steps:
      - slug: x
        depends_on: [y]
        module: m.wasm
      - slug: y
        depends_on: [x]
        module: m.wasm
`, []string{`flows.yaml:5: flow "a" has a dependency cycle among steps x, y`}},
		{"map with two deps", `
flows:
  - slug: a
    steps:
      - {slug: x, module: m.wasm}
      - {slug: y, module: m.wasm}
      - {slug: z, type: map, depends_on: [x, y], module: m.wasm}
`, []string{`flows.yaml:7: map step "z" has 2 dependencies`}},
		{"bad type", `
flows:
  - slug: a
    steps:
      - {slug: x, type: parallel, module: m.wasm}
`, []string{"flows.yaml:5: `type` must be `single` (the default) or `map`"}},
		{"options out of range", `
flows:
  - slug: a
    timeout: 0
    max_attempts: many
    steps:
      - slug: x
        module: m.wasm
        base_delay: -1
        memory_limit: 32mb
        fuel: 0
        deterministic: yes
`, []string{"flows.yaml:4: `timeout` is 0: it must be from 1 to 86400 (seconds)",
			"flows.yaml:5: `max_attempts` must be a whole number from 1 to 100",
			"flows.yaml:9: `base_delay` is -1",
			"flows.yaml:10: `memory_limit` \"32mb\" is not a size",
			"flows.yaml:11: `fuel` is 0: it must be from 1 to",
			"flows.yaml:12: `deterministic` must be true or false"}},
		{"missing module file", `
flows:
  - slug: a
    steps:
      - slug: x
        module: modules/examples/rust/greet.wasm
`, []string{"flows.yaml:6: module \"modules/examples/rust/greet.wasm\" not found", "run `make examples`"}},
		{"missing module key and slug", `
flows:
  - slug: a
    steps:
      - type: map
`, []string{"flows.yaml:5: step without a slug", "has no `module:`"}},
		{"no steps", "flows:\n  - slug: a\n", []string{`flows.yaml:2: flow "a" has no ` + "`steps:`"}},
		// pgflow 0.17's slug rules hold on every version.
		{"flow slug with a leading _", "flows:\n  - slug: _bad\n    steps:\n      - {slug: s, module: m.wasm}\n",
			[]string{`flows.yaml:2: flow slug "_bad": it starts with "_": pgflow 0.17+ requires a slug to start with a letter`, `(e.g. "bad")`}},
		{"flow slug with __", "flows:\n  - slug: a__b\n    steps:\n      - {slug: s, module: m.wasm}\n",
			[]string{`flows.yaml:2: flow slug "a__b": it holds __`, `(e.g. "a_b")`}},
		{"step slug ending in _", "flows:\n  - slug: a\n    steps:\n      - {slug: s_, module: m.wasm}\n",
			[]string{`flows.yaml:4: step slug "s_": it ends with _`}},
		{"step slugs differing in case", "flows:\n  - slug: a\n    steps:\n      - {slug: fetch, module: m.wasm}\n      - {slug: Fetch, module: m.wasm}\n",
			[]string{`flows.yaml:5: step "Fetch" of flow "a" differs from step "fetch" (line 4) only in case`}},
		{"external step with a module", "flows:\n  - slug: a\n    steps:\n      - {slug: s, module: m.wasm}\n      - {slug: t, external: true, module: m.wasm, fuel: 10}\n",
			[]string{"flows.yaml:5: step \"t\" of flow \"a\" is `external: true` (served by another worker): it takes no `module`",
				"it takes no `fuel`"}},
		{"every step external", "flows:\n  - slug: a\n    steps:\n      - {slug: s, external: true}\n",
			[]string{`flows.yaml:2: every step of flow "a" is ` + "`external: true`"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFlows(t, tc.yaml, "m.wasm")
			_, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded, want errors containing %q", tc.want)
			}
			msg := strings.ReplaceAll(err.Error(), path, "flows.yaml")
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
		})
	}
}

// Camel-case slugs, as in pgflow's own example app, are what pgflow.is_valid_slug takes on
// every release (letters of either case, digits, _): they load as written.
func TestCamelCaseSlugsAreAccepted(t *testing.T) {
	t.Parallel()
	path := writeFlows(t, "flows:\n  - slug: analyzeWebsite\n    steps:\n      - {slug: fetchPage, module: m.wasm}\n      - {slug: summarizeText, depends_on: [fetchPage], module: m.wasm}\n", "m.wasm")
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if fl := f.Flow("analyzeWebsite"); fl == nil || fl.Step("fetchPage") == nil || fl.Step("summarizeText") == nil {
		t.Fatalf("flows: %+v", f.Flows)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "file not found") {
		t.Fatalf("err = %v, want file not found", err)
	}
}

func TestStepConditions(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "h.wasm")
	if err := os.WriteFile(mod, []byte("\x00asm"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Parse("flows.yaml", dir, []byte(`
flows:
  - slug: f
    steps:
      - slug: a
        module: h.wasm
      - slug: b
        depends_on: [a]
        module: h.wasm
        if: {a: {plan: pro, seats: 3}}
        if_not:
          a:
            banned: true
        when_unmet: skip-cascade
        when_exhausted: skip
`))
	if err != nil {
		t.Fatal(err)
	}
	b := f.Flows[0].Step("b")
	if string(b.If) != `{"a":{"plan":"pro","seats":3}}` || string(b.IfNot) != `{"a":{"banned":true}}` ||
		b.WhenUnmet != SkipCascade || b.WhenExhausted != Skip || !b.HasConditions() {
		t.Fatalf("conditions: if %s, if_not %s, when_unmet %q, when_exhausted %q", b.If, b.IfNot, b.WhenUnmet, b.WhenExhausted)
	}
	if f.Flows[0].Step("a").HasConditions() {
		t.Error("a step without condition keys has conditions")
	}
	_, err = Parse("flows.yaml", dir, []byte(`
flows:
  - slug: f
    steps:
      - slug: a
        module: h.wasm
        if: [1, 2]
        when_unmet: ignore
        when_exhausted: 3
`))
	for _, want := range []string{
		"flows.yaml:7: `if` must be a JSON object",
		"flows.yaml:8: `when_unmet` must be skip, skip-cascade or fail",
		"flows.yaml:9: `when_exhausted` must be skip, skip-cascade or fail",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
