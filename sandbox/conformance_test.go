package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// exampleLangs and exampleNames are the 15 example modules `make examples` builds.
var (
	exampleLangs = []string{"rust", "tinygo", "assemblyscript", "go", "c"}
	exampleNames = []string{"greet", "word_count", "sum"}
)

// conformance cases: the same input must give these exact output bytes (or this exact
// handler error) in every language, on every engine, with fresh and reused instances.
var conformance = map[string][]struct {
	input string
	want  string // exact output JSON, or the exact handler error message when fail is set
	fail  bool
}{
	"greet": {
		{input: `{"run":{"name":"Ada"}}`, want: `{"greeting":"Hello, Ada!"}`},
		{input: `{"run":{"name":"Zoë \"Z\""}}`, want: `{"greeting":"Hello, Zoë \"Z\"!"}`},
		{input: `{"run":{"name":"Grace Hopper","extra":[1,2]}}`, want: `{"greeting":"Hello, Grace Hopper!"}`},
		{input: `{"run":{}}`, fail: true, want: "greet: input.run.name must be a string"},
		{input: `{"run":{"name":42}}`, fail: true, want: "greet: input.run.name must be a string"},
	},
	"word_count": {
		{input: `"the quick brown fox"`, want: `{"text":"the quick brown fox","words":4}`},
		{input: `""`, want: `{"text":"","words":0}`},
		{input: `"  spaced   out  "`, want: `{"text":"  spaced   out  ","words":2}`},
		{input: `"a\tb\nc"`, want: `{"text":"a\tb\nc","words":3}`},
		{input: `"héllo wörld"`, want: `{"text":"héllo wörld","words":2}`},
		{input: `42`, fail: true, want: "word_count: input must be a JSON string"},
	},
	"sum": {
		{input: `{"run":[1,2,3]}`, want: `{"sum":6}`},
		{input: `[10,20,30,40]`, want: `{"sum":100}`},
		{input: `{"run":[]}`, want: `{"sum":0}`},
		{input: `{"run":{"a":1},"numbers":[4,5]}`, want: `{"sum":9}`},
		{input: `[1.5,2]`, want: `{"sum":3.5}`},
		{input: `[-1,1e3]`, want: `{"sum":999}`},
		{input: `[0.1,0.2]`, want: `{"sum":0.30000000000000004}`},
		{input: `{"run":"x"}`, fail: true, want: "sum: input has no array of numbers"},
		{input: `[1,"a"]`, fail: true, want: "sum: element 1 is not a number"},
	},
}

func TestExamplesConformance(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
		for _, lang := range exampleLangs {
			for _, name := range exampleNames {
				t.Run(lang+"/"+name, func(t *testing.T) {
					path := exampleModule(t, lang, name)
					for _, reuse := range []bool{false, true} {
						m := load(t, e, path, sandbox.ModuleConfig{ReuseInstance: reuse})
						if m.Info().ABIVersion != 1 || m.Info().Mode != sandbox.ModeReactor {
							t.Errorf("%s/%s: ABI %d, mode %s; want a version 1 reactor", lang, name, m.Info().ABIVersion, m.Info().Mode)
						}
						for _, c := range conformance[name] {
							res, err := m.Run(context.Background(), task(c.input, 30*time.Second))
							if c.fail {
								var se *sandbox.Error
								if !errors.As(err, &se) || se.Kind != sandbox.KindHandlerError || se.Message != c.want {
									t.Errorf("%s/%s (reuse %v) on %s: %v, want handler_error: %s", lang, name, reuse, c.input, err, c.want)
								}
								continue
							}
							if err != nil {
								t.Errorf("%s/%s (reuse %v) on %s: %v", lang, name, reuse, c.input, err)
								continue
							}
							if string(res.Output) != c.want {
								t.Errorf("%s/%s (reuse %v) on %s: %s, want %s", lang, name, reuse, c.input, res.Output, c.want)
							}
						}
					}
				})
			}
		}
	})
}
