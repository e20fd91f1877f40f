package jshandler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// forEachEngine runs f once per engine of the build (wasmtime with -tags wasmtime).
func forEachEngine(t *testing.T, f func(t *testing.T, e sandbox.Engine)) {
	for _, name := range sandbox.Engines() {
		t.Run(name, func(t *testing.T) {
			e, err := sandbox.New(name, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(context.Background()) })
			f(t, e)
		})
	}
}

func load(t testing.TB, e sandbox.Engine, name string, mc sandbox.ModuleConfig) *jshandler.Module {
	t.Helper()
	m, err := jshandler.Load(context.Background(), e, filepath.Join("testdata", name), mc, jshandler.Options{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// taskContext is the context the worker gives a task (abi/SPEC.md).
func taskContext(fields map[string]any) []byte {
	c := map[string]any{"run_id": "0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b", "flow_slug": "f", "step_slug": "s", "task_index": 0,
		"attempt": 1, "msg_id": 7, "flow_input": map[string]any{"x": 1}, "worker_id": "6f1c2a9e-8b1d-4c3e-9f00-1234567890ab",
		"timeout_ms": 5000, "idempotency_key": "0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b:s:0"}
	for k, v := range fields {
		c[k] = v
	}
	b, _ := json.Marshal(c)
	return b
}

func run(t testing.TB, m sandbox.Module, input string, timeout time.Duration) (sandbox.Result, error) {
	t.Helper()
	return m.Run(context.Background(), sandbox.Task{Input: []byte(input), Context: taskContext(nil), Timeout: timeout})
}

func wantKind(t testing.TB, err error, k sandbox.Kind, parts ...string) {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) {
		t.Fatalf("want a %s *sandbox.Error, got %T: %v", k, err, err)
	}
	if se.Kind != k {
		t.Fatalf("want kind %s, got %s: %s", k, se.Kind, se.Message)
	}
	for _, p := range parts {
		if !strings.Contains(se.Message, p) {
			t.Errorf("%s message %q does not contain %q", k, se.Message, p)
		}
	}
}

func jsonEqual(t testing.TB, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("output %s, want %s", got, want)
	}
}

// A TypeScript handler importing another file: its output, its console.log line, and a
// thrown error with the stack at the lines of the .ts sources.
func TestTypeScriptHandler(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "greet.ts", sandbox.ModuleConfig{})
		if got := m.Sources(); len(got) != 2 || !strings.HasSuffix(got[0], "greet.ts") || !strings.HasSuffix(got[1], "lib/greeting.ts") {
			t.Errorf("sources %v", got)
		}
		if info := m.Info(); info.Path != filepath.Join("testdata", "greet.ts") || info.ABIVersion != 1 {
			t.Errorf("info %+v", info)
		}
		res, err := run(t, m, `{"run":{"name":"Ada"}}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"greeting":"Hello, Ada!"}`)
		if len(res.Logs) != 1 || res.Logs[0].Message != `greeting Ada {"step":"s"}` || res.Logs[0].Level != 1 {
			t.Errorf("logs %+v", res.Logs)
		}
		_, err = run(t, m, `{"run":{"name":""}}`, 5*time.Second)
		wantKind(t, err, sandbox.KindHandlerError, "greeting: the name is empty\n    at greeting (lib/greeting.ts:3:", "at handler (greet.ts:8:")
		if strings.Contains(err.Error(), "handler.js") || strings.Contains(err.Error(), "prelude") {
			t.Errorf("the stack shows the bundle or the prelude: %v", err)
		}
	})
}

// The web globals handlers lean on behave as they do in browsers and Node.
func TestWebGlobals(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		res, err := run(t, load(t, e, "web.ts", sandbox.ModuleConfig{}), `{}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"href":"https://example.com/a/b/c?x=1&y=a+b&z=%C3%A9+%26#top","host":"example.com","path":"/a/b/c",
			"x":"1","y":"a b","hash":"#top","rel":"http://h:8080/root?q","origin":"http://h:8080","port":"8080",
			"params":"a=1&b=two+words","invalid":false,"header":"1, 2","json":{"ok":true},"type":"application/json",
			"bytes":6,"text":"héllo","b64":"aGkh","unb64":"hi!"}`)
	})
}

// A plain JavaScript module (.mjs) is a handler too.
func TestJavaScriptHandler(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		res, err := run(t, load(t, e, "plain.mjs", sandbox.ModuleConfig{}), `{"run":{"n":21}}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"doubled":42,"step":"s"}`)
	})
}

// Every task starts from the snapshot: module state, globals and prototypes a task changed
// are gone in the next; random bytes differ. A step that opts into reused instances keeps
// them (docs/sandbox.md), as for any language.
func TestNothingSurvivesATask(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		for _, reuse := range []bool{false, true} {
			m := load(t, e, "isolation.ts", sandbox.ModuleConfig{ReuseInstance: reuse})
			randoms := map[any]bool{}
			for i := 1; i <= 3; i++ {
				res, err := run(t, m, `{}`, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				var out struct {
					ModuleCounter, GlobalCounter int
					SawPollution                 bool
					Random                       float64
					UUID                         string
				}
				if err := json.Unmarshal(res.Output, &out); err != nil {
					t.Fatal(err)
				}
				want := 1
				if reuse {
					want = i
				}
				if out.ModuleCounter != want || out.GlobalCounter != want || out.SawPollution != (want > 1) {
					t.Errorf("reuse %v, task %d: %s; want counters at %d", reuse, i, res.Output, want)
				}
				if randoms[out.Random] || randoms[out.UUID] || out.Random < 0 || out.Random >= 1 || len(out.UUID) != 36 || out.UUID[14] != '4' {
					t.Errorf("task %d drew %v and %s again, or out of range", i, out.Random, out.UUID)
				}
				randoms[out.Random], randoms[out.UUID] = true, true
			}
		}
		// A deterministic step draws the same bytes in every task of the same identity.
		m := load(t, e, "isolation.ts", sandbox.ModuleConfig{})
		var outs []string
		for range 2 {
			res, err := m.Run(context.Background(), sandbox.Task{Input: []byte(`{}`), Context: taskContext(nil), Timeout: 5 * time.Second, Seed: []byte("run/f/s/0")})
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, string(res.Output))
		}
		if outs[0] != outs[1] {
			t.Errorf("deterministic tasks drew differently: %s, %s", outs[0], outs[1])
		}
	})
}

// The step timeout stops a busy loop and exponential recursion at the deadline; deep
// recursion fails with a message that says what happened; a memory bomb is memory_limit;
// nothing is left running.
func TestLimits(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		const timeout = 300 * time.Millisecond
		for _, c := range []struct{ file, input string }{{"loop.ts", `{}`}, {"fib.ts", `{"n": 60}`}} {
			m := load(t, e, c.file, sandbox.ModuleConfig{})
			start := time.Now()
			_, err := run(t, m, c.input, timeout)
			took := time.Since(start)
			wantKind(t, err, sandbox.KindTimeout, "timed out after 300ms")
			t.Logf("%s stopped %v after its deadline", c.file, took-timeout)
			if took > timeout+time.Second {
				t.Errorf("%s ran %v, past its deadline + 1s", c.file, took)
			}
		}
		m := load(t, e, "recurse.ts", sandbox.ModuleConfig{})
		res, err := run(t, m, `{"depth": 500}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"depth":500}`)
		_, err = run(t, m, `{"depth": 1000000}`, 5*time.Second)
		wantKind(t, err, sandbox.KindTrap, "the JavaScript call stack overflowed")

		_, err = run(t, load(t, e, "membomb.ts", sandbox.ModuleConfig{MemoryLimit: 16 << 20}), `{}`, 10*time.Second)
		wantKind(t, err, sandbox.KindMemoryLimit, "memory limit of 16 MiB reached")
		if e.Abandoned() != 0 {
			t.Errorf("%d calls abandoned", e.Abandoned())
		}
		// Fuel is counted per task, the same for the same task.
		var used []int64
		for range 2 {
			res, err := run(t, load(t, e, "fib.ts", sandbox.ModuleConfig{Fuel: 1 << 40}), `{"n": 15}`, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			used = append(used, res.FuelUsed)
		}
		if used[0] == 0 || used[0] != used[1] {
			t.Errorf("fuel used: %v, want the same non-zero figure twice", used)
		}
		_, err = run(t, load(t, e, "fib.ts", sandbox.ModuleConfig{Fuel: used[0] / 2}), `{"n": 15}`, 5*time.Second)
		wantKind(t, err, sandbox.KindFuelExhausted)
	})
}

// async/await, microtasks and timers work; a promise that can never settle fails at once
// instead of waiting for the timeout; every way of throwing reads as pgflow's own worker
// writes it, with the cause.
func TestAsyncAndFailures(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		res, err := run(t, load(t, e, "timers.ts", sandbox.ModuleConfig{}), `{}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `["microtask","after sleep","late"]`)
		// A handler error, not a timeout: the sandbox saw that nothing could settle the
		// promise long before the (generous) deadline.
		_, err = run(t, load(t, e, "pending.ts", sandbox.ModuleConfig{}), `{}`, 2*time.Minute)
		wantKind(t, err, sandbox.KindHandlerError, "the handler's promise never settled")
		m := load(t, e, "failures.ts", sandbox.ModuleConfig{})
		for how, want := range map[string]string{
			"string": "a plain string",
			"object": `{"code":42,"why":"an object"}`,
			"reject": "rejected\n    at handler (failures.ts:",
			"cause":  "outer\n    at handler (failures.ts:11:",
			"bigint": "BigInt",
		} {
			_, err := run(t, m, fmt.Sprintf(`{"how": %q}`, how), 5*time.Second)
			wantKind(t, err, sandbox.KindHandlerError, want)
			if se := (*sandbox.Error)(nil); errors.As(err, &se) && how != "bigint" && !strings.HasPrefix(se.Message, strings.Split(want, "\n")[0]) {
				t.Errorf("%s: %q does not start with the thrown message", how, se.Message)
			}
		}
		_, err = run(t, m, `{"how": "cause"}`, 5*time.Second)
		wantKind(t, err, sandbox.KindHandlerError, "caused by: inner")
		res, err = run(t, m, `{"how": "undefined"}`, 5*time.Second)
		if err != nil || string(res.Output) != "null" {
			t.Errorf("undefined: %s, %v", res.Output, err)
		}
		res, err = run(t, m, `{"how": "log-error"}`, 5*time.Second)
		if err != nil || len(res.Logs) != 1 || res.Logs[0].Level != 3 || !strings.Contains(res.Logs[0].Message, "SyntaxError") ||
			!strings.Contains(res.Logs[0].Message, "failures.ts:") {
			t.Errorf("console.error of an error: %+v, %v", res.Logs, err)
		}
	})
}

// The handler gets what pgflow's own TypeScript worker gives it on the same database: before
// 0.12 the ABI's input; from 0.12 the flow input for a root step and the dependencies'
// outputs for the others; the element for a map step; ctx carries the rest.
func TestInputShapeFollowsPgflow(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "shape.ts", sandbox.ModuleConfig{})
		flowInput := map[string]any{"n": 3}
		stepTask := `{"flow_slug":"f","run_id":"0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b","step_slug":"s","task_index":%d,"msg_id":7,"attempt":%d,"input":%s}`
		for _, c := range []struct {
			name, version, stepType string
			deps                    []string
			input, want             string
			index, attempt          int
		}{
			{"0.8 root", "0.8", "single", nil, `{"run":{"n":3}}`, `{"run":{"n":3}}`, 0, 1},
			{"0.8 dependent", "0.8", "single", []string{"a"}, `{"run":{"n":3},"a":1}`, `{"run":{"n":3},"a":1}`, 0, 1},
			{"0.12 root", "0.12", "single", nil, `{"run":{"n":3}}`, `{"n":3}`, 0, 2},
			{"0.14 dependent", "0.14", "single", []string{"a", "b"}, `{"run":{"n":3},"a":1,"b":[2]}`, `{"a":1,"b":[2]}`, 0, 1},
			{"0.14 dependent, a dependency skipped", "0.14", "single", []string{"a", "b"}, `{"run":{"n":3},"a":1}`, `{"a":1}`, 0, 1},
			{"0.14 map", "0.14", "map", []string{"a"}, `"element"`, `"element"`, 4, 1},
			{"main map", "main-20261001", "map", nil, `{"run":"an element that is an object"}`, `{"run":"an element that is an object"}`, 1, 1},
			{"no version", "", "single", nil, `{"run":{"n":3}}`, `{"run":{"n":3}}`, 0, 1},
		} {
			fields := map[string]any{"step_type": c.stepType, "depends_on": c.deps, "task_index": c.index, "attempt": c.attempt, "flow_input": flowInput}
			if c.version != "" {
				fields["pgflow_version"] = c.version
			}
			res, err := m.Run(context.Background(), sandbox.Task{Input: []byte(c.input), Context: taskContext(fields), Timeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			want := fmt.Sprintf(`{"input":%s,"flowInput":{"n":3},"stepTask":`+stepTask+`,"key":"0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b:s:0","readCt":%d}`,
				c.want, c.index, c.attempt, c.want, c.attempt)
			t.Run(c.name, func(t *testing.T) { jsonEqual(t, res.Output, want) })
		}
		// A map task reads the flow input from the context only when it asks: whatever the
		// input holds (escapes, brackets in strings, a nested "flow_input"), it reads it whole.
		for _, fi := range []string{`"x\"}]\\"`, `{"a":"\"}]","flow_input":[1,{"b":"\\"}],"c":-1.5e3}`, `[true,null,false,0,{}]`, `12`} {
			c := []byte(`{"step_slug":"flow_input","flow_input" : ` + fi + ` ,"step_type":"map","pgflow_version":"0.14","idempotency_key":"k","attempt":1}`)
			res, err := m.Run(context.Background(), sandbox.Task{Input: []byte(`1`), Context: c, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("flow input %s: %v", fi, err)
			}
			var out struct{ FlowInput json.RawMessage }
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatal(err)
			}
			t.Run("flow input "+fi, func(t *testing.T) { jsonEqual(t, out.FlowInput, fi) })
		}
		// A run input too large for the context: a single step still finds it under "run"; a
		// map task is told why it has none.
		big := map[string]any{"pgflow_version": "0.14", "step_type": "single", "flow_input": nil, "flow_input_omitted": true, "flow_input_bytes": 70000}
		res, err := m.Run(context.Background(), sandbox.Task{Input: []byte(`{"run":{"n":3},"a":1}`), Context: taskContext(map[string]any{
			"pgflow_version": "0.14", "step_type": "single", "depends_on": []string{"a"}, "flow_input": nil, "flow_input_omitted": true, "flow_input_bytes": 70000}),
			Timeout: 5 * time.Second})
		if err != nil || !bytes.Contains(res.Output, []byte(`"flowInput":{"n":3}`)) {
			t.Errorf("single step, large input: %s, %v", res.Output, err)
		}
		big["step_type"] = "map"
		_, err = m.Run(context.Background(), sandbox.Task{Input: []byte(`1`), Context: taskContext(big), Timeout: 5 * time.Second})
		wantKind(t, err, sandbox.KindHandlerError, "ctx.flowInput is not available", "70000 bytes")
	})
}

// ctx.env reads only the names the step grants, through config_get: a granted name its value,
// a granted name the worker lacks and any other name undefined (pgflow's ctx.env is a record,
// and SDKs probe for optional variables), never the worker's own environment.
func TestEnv(t *testing.T) {
	t.Setenv("JS_TEST_TOKEN", "s3cret")
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		caps := sandbox.Capabilities{Env: sandbox.NewEnv([]string{"JS_TEST_TOKEN", "JS_TEST_UNSET"}, os.LookupEnv), Step: "env step"}
		m := load(t, e, "env.ts", sandbox.ModuleConfig{Capabilities: caps})
		res, err := run(t, m, `{"name":"JS_TEST_TOKEN"}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"value":"s3cret","keys":[],"json":"{}"}`)
		res, err = run(t, m, `{"name":"JS_TEST_UNSET"}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"value":null,"keys":[],"json":"{}"}`)
		t.Setenv("HOME", "/root-of-the-worker") // set, but not granted
		res, err = run(t, m, `{"name":"HOME"}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"value":null,"keys":[],"json":"{}"}`)
	})
}

// fetch goes through the step's HTTP capability: an allowed host answers with status,
// headers and a body as text or JSON; an unlisted host fails the task with the host's own
// message, the one every other language gets.
func TestFetch(t *testing.T) {
	t.Setenv("API_TOKEN", "tok_123")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"method": r.Method, "auth": r.Header.Get("Authorization"),
			"key": r.Header.Get("X-Idempotency-Key"), "body": body.String()})
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	pattern, err := httpcap.ParsePattern(host)
	if err != nil {
		t.Fatal(err)
	}
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		caps := sandbox.Capabilities{HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}}, Env: sandbox.NewEnv([]string{"API_TOKEN"}, os.LookupEnv), Step: "fetch"}
		m := load(t, e, "fetch.ts", sandbox.ModuleConfig{Capabilities: caps})
		res, err := run(t, m, fmt.Sprintf(`{"url": %q, "method": "post", "body": "héllo"}`, srv.URL+"/x"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"status":200,"ok":true,"type":"application/json",
			"body":{"method":"POST","auth":"Bearer tok_123","key":"0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b:s:0","body":"héllo"}}`)
		_, err = run(t, m, `{"url": "http://unlisted.example/x"}`, 5*time.Second)
		wantKind(t, err, sandbox.KindHandlerError)
		if se := (*sandbox.Error)(nil); errors.As(err, &se) && !strings.HasPrefix(se.Message, "http: host unlisted.example:80 is not allowed: it matches no entry of http.allow of fetch") {
			t.Errorf("unlisted host: %q", se.Message)
		}
		// Without an http key at all.
		m = load(t, e, "fetch.ts", sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{Env: caps.Env, Step: "fetch"}})
		_, err = run(t, m, fmt.Sprintf(`{"url": %q}`, srv.URL), 5*time.Second)
		wantKind(t, err, sandbox.KindHandlerError, "may not make HTTP requests")
	})
}

// A handler that does not build, or whose module fails while it loads, is refused at load
// with the file, line and column; top-level code cannot use capabilities (it runs once for
// every task) and cannot run forever.
func TestRefusedAtLoad(t *testing.T) {
	e, err := sandbox.New(sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	for file, want := range map[string][]string{
		"syntax.ts":         {"syntax.ts:2:22: Unexpected \";\"", "const x = input.a +;"},
		"unresolved.ts":     {`unresolved.ts:1:24: Could not resolve "./missing"`, `unresolved.ts:2:16: import of "node:fs" refused: handlers run in pgflow-wasm's sandbox, which has no fs`, `the Node built-ins here are node:buffer, node:events, node:util, node:crypto`},
		"toplevel_fetch.ts": {"toplevel_fetch.ts:1:13: Top-level await is currently not supported"},
		"toplevel_throw.ts": {"the handler module failed while loading: Expected property name", "at <anonymous> (toplevel_throw.ts:1:"},
		"no_export.ts":      {"the handler module exports no handler: write `export default async function handler(input, ctx)"},
		"toplevel_loop.ts":  {"top-level code did not finish within 500ms"},
		"missing.ts":        {"missing.ts"},
	} {
		_, err := jshandler.Load(context.Background(), e, filepath.Join("testdata", "broken", file), sandbox.ModuleConfig{},
			jshandler.Options{LoadTimeout: 500 * time.Millisecond})
		wantKind(t, err, sandbox.KindInvalidModule, want...)
	}
	res, err := run(t, load(t, e, "toplevel_refused.ts", sandbox.ModuleConfig{}), `{}`, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"refused":"fetch is not available while the handler module loads: its top-level code runs once, when the worker loads the step, and what it computes is shared by every task; call fetch and read ctx.env inside the handler"}`)
}

// The same handler makes the same snapshot (no clock or randomness reaches it), which is what
// lets the worker tell a changed handler by its module's sha256; a new process reads it back
// from the cache instead of making it again.
func TestSnapshotIsReproducibleAndCached(t *testing.T) {
	e, err := sandbox.New(sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	dir := t.TempDir()
	src := filepath.Join(dir, "h.ts")
	if err := os.WriteFile(src, []byte("const n = Math.random() + Date.now();\nexport default async () => ({ n });\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var sums []string
	for _, cache := range []string{t.TempDir(), t.TempDir()} {
		jshandler.ForgetSnapshots()
		m, err := jshandler.Load(context.Background(), e, src, sandbox.ModuleConfig{}, jshandler.Options{CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, m.Info().SHA256)
		_ = m.Close(context.Background())
		if files, _ := filepath.Glob(filepath.Join(cache, "snapshots", "*.wasm")); len(files) != 1 {
			t.Errorf("cache %s holds %v", cache, files)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two snapshots of one handler differ: %v", sums)
	}
	// An edit is a new snapshot.
	if err := os.WriteFile(src, []byte("export default async () => 2;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := jshandler.Load(context.Background(), e, src, sandbox.ModuleConfig{}, jshandler.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if m.Info().SHA256 == sums[0] {
		t.Error("an edited handler kept its snapshot")
	}
}

// How deep JavaScript may recurse (docs/guests.md, "Limits"): the deepest depth of
// testdata/recurse.ts that still returns, found by bisection. Past it the task fails with
// the stack overflow message.
func TestRecursionDepth(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "recurse.ts", sandbox.ModuleConfig{})
		lo, hi := 1, 100_000
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if _, err := run(t, m, fmt.Sprintf(`{"depth": %d}`, mid), 10*time.Second); err == nil {
				lo = mid
			} else {
				wantKind(t, err, sandbox.KindTrap, "the JavaScript call stack overflowed")
				hi = mid - 1
			}
		}
		t.Logf("%s: the deepest recursion that returns: %d calls", e.Name(), lo)
		if want := map[string]int{sandbox.EngineWazero: 2000, sandbox.EngineWasmtime: 500}[e.Name()]; lo < want {
			t.Errorf("%s: recursion stops at %d calls, want at least %d", e.Name(), lo, want)
		}
	})
}

// A handler's new Date() is the wall clock and a timer waits on the real clock, on both
// engines; a deterministic step (FixedClock) sees the fixed clock of 2022-01-01 instead, and
// its timers fire without waiting.
func TestHandlersReadTheRealClockUnlessDeterministic(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "clock.ts", sandbox.ModuleConfig{})
		type reading struct {
			ISO        string  `json:"iso"`
			Wall       float64 `json:"wall"`
			Mono       float64 `json:"mono"`
			SleptWall  float64 `json:"sleptWall"`
			SleptMono  float64 `json:"sleptMono"`
			TimeOrigin float64 `json:"timeOrigin"`
		}
		read := func(fixed bool) (reading, time.Duration) {
			t.Helper()
			began := time.Now()
			res, err := m.Run(context.Background(), sandbox.Task{Input: []byte(`{}`), Context: taskContext(nil),
				Timeout: time.Minute, FixedClock: fixed})
			if err != nil {
				t.Fatal(err)
			}
			var r reading
			if err := json.Unmarshal(res.Output, &r); err != nil {
				t.Fatalf("%s: %v", res.Output, err)
			}
			return r, time.Since(began)
		}
		// Margins for a loaded 2-core machine: the clock is the host's, so the guest's
		// reading lies between the host's readings around the call, give or take a minute.
		before := time.Now()
		r, _ := read(false)
		at, err := time.Parse(time.RFC3339Nano, r.ISO)
		if err != nil {
			t.Fatalf("new Date().toISOString() = %q: %v", r.ISO, err)
		}
		if d := at.Sub(before); d < -time.Minute || d > time.Minute {
			t.Errorf("new Date() = %s, host time %s: want within a minute", r.ISO, before.Format(time.RFC3339Nano))
		}
		if d := time.UnixMilli(int64(r.Wall)).Sub(before); d < -time.Minute || d > time.Minute {
			t.Errorf("Date.now() = %v, %s from the host's time", r.Wall, d)
		}
		if r.SleptWall < 199 || r.SleptMono < 199 {
			t.Errorf("setTimeout(200) waited %v ms by Date and %v ms by performance.now(), want at least 200", r.SleptWall, r.SleptMono)
		}
		if r.Mono < 0 {
			t.Errorf("performance.now() = %v, want non-negative", r.Mono)
		}
		if d := time.UnixMilli(int64(r.TimeOrigin)).Sub(before); d > time.Minute || r.TimeOrigin <= 0 {
			t.Errorf("performance.timeOrigin = %v, not a wall time before the task", r.TimeOrigin)
		}

		f, took := read(true)
		if !strings.HasPrefix(f.ISO, "2022-01-01T00:00:") {
			t.Errorf("deterministic: new Date() = %s, want the fixed 2022-01-01", f.ISO)
		}
		if f.SleptMono < 200 {
			t.Errorf("deterministic: setTimeout(200) moved performance.now() by %v ms, want at least 200", f.SleptMono)
		}
		t.Logf("a deterministic task with a 200 ms timer took %s", took)
	})
}

// An error names the line it happened on, whatever the statement: a throw, a destructuring of
// null in a declaration, a property of undefined in a return, a call of undefined, a thrown
// expression over several lines, an error of a built-in. (QuickJS records positions only at
// some points; the engine adds them where a return, a declaration, an if or a while starts:
// engine/positions.sed. Without it cases 2 and 3 named lines 13 and 4.)
func TestErrorsNameTheLineTheyHappenOn(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "positions.ts", sandbox.ModuleConfig{})
		for c, want := range map[int][]string{
			1: {"at h (positions.ts:11:"},
			2: {"at h (positions.ts:14:"},
			3: {"at helper (positions.ts:5:", "at h (positions.ts:18:"},
			4: {"at h (positions.ts:22:"},
			5: {"at h (positions.ts:26:"},
			6: {"at h (positions.ts:31:"},
		} {
			_, err := run(t, m, fmt.Sprintf(`{"case": %d}`, c), 5*time.Second)
			wantKind(t, err, sandbox.KindHandlerError, want...)
		}
	})
}
