package sandbox_test

import (
	"context"
	"errors"
	"strings"
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
		{input: `{"run":"x"}`, want: `{"sum":0}`},
		{input: `[1,"a"]`, want: `{"sum":1}`},
		// A step's dependencies count, its flow input ("run") does not.
		{input: `{"run":[10],"a":[1,2]}`, want: `{"sum":3}`},
		{input: `{"run":{"value":[1,2,3]},"b":{"sum":6},"c":{"sum":6}}`, want: `{"sum":12}`},
		{input: `{"run":["the quick brown fox","jumps"],"count":[{"text":"the quick brown fox","words":4},{"text":"jumps","words":1}]}`, want: `{"sum":5}`},
		{input: `{"a":[1],"run":[10]}`, want: `{"sum":1}`},
		{input: `{"r\u0075n":[10],"a":[1]}`, want: `{"sum":1}`},
		{input: `{"run":[1e400],"a":[1]}`, want: `{"sum":1}`},
		// Anything else counts whole: numbers at any depth, in document order.
		{input: `[1,[2,{"x":3}],"a",true,null]`, want: `{"sum":6}`},
		{input: `5`, want: `{"sum":5}`},
		{input: `"x"`, want: `{"sum":0}`},
		{input: `{"run":5}`, want: `{"sum":5}`},
		{input: `{"run":1,"run":2}`, want: `{"sum":3}`},
		{input: `{"a":1,"a":2}`, want: `{"sum":3}`},
		{input: `{"1":2,"-3":["4e1","x"]}`, want: `{"sum":2}`},
		{input: `[1e16,1,-1e16]`, want: `{"sum":0}`},
		{input: `[-1e16,1e16,1]`, want: `{"sum":1}`},
		{input: `{}`, want: `{"sum":0}`},
		{input: `[-0]`, want: `{"sum":0}`},
		{input: `[1e-400]`, want: `{"sum":0}`},
		{input: `[1e400]`, fail: true, want: "sum: number 1e400 is out of range"},
		{input: "[1" + strings.Repeat("0", 400) + "]", fail: true, want: "sum: number 1" + strings.Repeat("0", 39) + "... is out of range"},
		{input: `[1e308,1e308]`, fail: true, want: "sum: the sum is not a finite number"},
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
