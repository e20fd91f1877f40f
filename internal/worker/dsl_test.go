package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// dslFlows loads a flows file written into the test project of @pgflow/dsl flow files
// (testdata/dslflows, installed by `make dsl-testdata`), so its entries name the project's
// files and its node_modules.
func dslFlows(t *testing.T, name, text string) *flowfile.File {
	t.Helper()
	dir := filepath.Join(workertest.RepoRoot(t), "testdata", "dslflows")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@pgflow", "dsl", "package.json")); err != nil {
		t.Fatalf("@pgflow/dsl is not installed in %s: run `make dsl-testdata`", dir)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	f, err := flowfile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Flow files of @pgflow/dsl served as they are: every step's inline handler runs, and each
// run's output is what the handlers compute from its input (worked out by hand beside each
// run). Written for @pgflow/dsl 0.8 (every single step gets the run input under "run"), so on
// pgflow 0.8 to 0.11.
func TestDSLFlowFilesRunAsTheyAreWritten(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	if pgflowSplitsInput(t, db) {
		t.Skip("these flows are written for @pgflow/dsl 0.8's input (the run input under \"run\"); TestASplitDSLFlow runs one in 0.12's style")
	}
	f := dslFlows(t, "flows-worker-test.yaml", `flows:
  - flow: supabase/functions/_flows/analyze_website.ts
  - flow: supabase/functions/_flows/text_maps.ts
`)
	startWorker(t, db.Pool, f, worker.Config{})
	for _, c := range []struct{ flow, input, output string }{
		// website: host example.com, content "page of example.com at /a/b" (27 characters), so
		// sentiment 27/100, the summary in upper case; saveToDb gathers them.
		{"analyze_website", `{"url": "https://example.com/a/b"}`, `{"saveToDb": {"websiteUrl": "https://example.com/a/b", "sentiment": 0.27,
			"summary": "PAGE OF EXAMPLE.COM AT /A/B", "savedBy": "saveToDb"}}`},
		// Each string trimmed and lower-cased, then capitalised, then counted.
		{"text_processing", `[" Hello ", "WORLD", "pgFlow"]`, `{"summarize": {"processed": 3, "results": ["Hello", "World", "Pgflow"]}}`},
		// The finite numbers (1, 2, 3), squared, summed: 14.
		{"squares", `{"numbers": [1, 2, 3]}`, `{"total": 14}`},
	} {
		id := startRun(t, db.Pool, c.flow, c.input)
		r := waitRun(t, db.Pool, id, 60*time.Second)
		if r.Status != "completed" {
			t.Fatalf("%s: %s (%s)", c.flow, r.Status, r.Error)
		}
		jsonEqual(t, r.Output, c.output)
	}
}

// @pgflow/dsl ships an example flow (dist/example-flow.js, analyze_website): served from the
// npm package's own file, unchanged. Its outputs follow from its code: website's content is
// "Lorem ipsum " and the URL's length, summary "Lorem ipsum " and that content's length,
// sentiment a Math.random() score, and saveToDb's output "success".
func TestTheDSLPackagesOwnExampleFlowRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	if pgflowSplitsInput(t, db) {
		t.Skip("@pgflow/dsl 0.8's example flow reads the run input under \"run\", as pgflow 0.8 to 0.11 give it")
	}
	f := dslFlows(t, "flows-example-test.yaml", `flows:
  - flow: node_modules/@pgflow/dsl/dist/example-flow.js
`)
	startWorker(t, db.Pool, f, worker.Config{})
	const url = "https://pgflow.dev/x" // 20 characters
	id := startRun(t, db.Pool, "analyze_website", `{"url": "`+url+`"}`)
	r := waitRun(t, db.Pool, id, 60*time.Second)
	if r.Status != "completed" {
		t.Fatalf("analyze_website: %s (%s)", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, `{"saveToDb": "success"}`)
	outputs := map[string]json.RawMessage{}
	rows, err := db.Pool.Query(context.Background(), `select step_slug, output::text from pgflow.step_tasks where run_id = $1::uuid`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var step, out string
		if err := rows.Scan(&step, &out); err != nil {
			t.Fatal(err)
		}
		outputs[step] = json.RawMessage(out)
	}
	jsonEqual(t, outputs["website"], `{"content": "Lorem ipsum 20"}`)
	jsonEqual(t, outputs["summary"], `{"aiSummary": "Lorem ipsum 14"}`)
	var sentiment struct{ Score *float64 }
	if err := json.Unmarshal(outputs["sentiment"], &sentiment); err != nil || sentiment.Score == nil || *sentiment.Score < 0 || *sentiment.Score >= 1 {
		t.Errorf("sentiment %s: want a Math.random() score in [0, 1)", outputs["sentiment"])
	}
}

// One step of a DSL flow that already has runs moves to another worker, the rest to
// pgflow-wasm from the same file: the flow keeps its slug and its history. The flow was
// compiled and served by another worker first, as pgflow's own worker on 0.17+ compiles it
// (a queue per step); then pgflow-wasm serves the file with `publish: {external: true}` and
// the other worker keeps only publish. Needs per-step queues (pgflow 0.17+).
func TestASplitDSLFlowKeepsItsSlugAndHistory(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	if !db.Protocol(t).QueueNames {
		t.Skip("a split flow needs per-step queues: pgflow 0.17+ (`make test-pgflow-main` runs this)")
	}
	ctx := context.Background()
	step := func(slug string, deps ...string) string {
		d, _ := json.Marshal(append([]string{}, deps...))
		return `{"slug": "` + slug + `", "stepType": "single", "dependencies": ` + string(d) + `, "whenUnmet": "skip", "whenExhausted": "fail",
			"requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}`
	}
	var compiled string
	if err := db.Pool.QueryRow(ctx, `select pgflow.ensure_flow_compiled('summarize_article', $1::jsonb, 'step')::text`,
		`{"options": {"maxAttempts": 3, "baseDelay": 5, "timeout": 15}, "steps": [`+
			step("words")+`, `+step("summary", "words")+`, `+step("publish", "summary")+`, `+step("notify", "publish", "summary")+`]}`).
		Scan(&compiled); err != nil || !strings.Contains(compiled, `"compiled"`) {
		t.Fatalf("ensure_flow_compiled: %s %v", compiled, err)
	}
	const article = `{"title": "t", "body": "pgflow runs flows in Postgres"}`
	// words: 5 of them; summary: {count 5, first "pgflow runs flows"}; publish: {published 5}.
	const want = `{"notify": "pgflow runs flows... (5 words)"}`
	publish := func(input string) string {
		var in struct{ Summary struct{ Count int } }
		_ = json.Unmarshal([]byte(input), &in)
		b, _ := json.Marshal(map[string]int{"published": in.Summary.Count})
		return string(b)
	}
	serve := func(w *sqlWorker) func() {
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var err error
		wg.Add(1)
		go func() { defer wg.Done(); err = w.run(wctx, t) }()
		return func() {
			stop()
			wg.Wait()
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("the other worker: %v", err)
			}
		}
	}
	// Before: the other worker serves the whole flow.
	stopWhole := serve(&sqlWorker{id: kit.NewUUID(), pool: db.Pool, flow: "summarize_article", steps: map[string]func(string) string{
		"words":   func(string) string { return `["pgflow", "runs", "flows", "in", "Postgres"]` },
		"summary": func(string) string { return `{"count": 5, "first": "pgflow runs flows"}` },
		"publish": publish,
		"notify":  func(string) string { return `"pgflow runs flows... (5 words)"` },
	}})
	before := startRun(t, db.Pool, "summarize_article", article)
	r := waitRun(t, db.Pool, before, 60*time.Second)
	stopWhole()
	if r.Status != "completed" {
		t.Fatalf("before the split: %s (%s)", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, want)

	split := dslFlows(t, "flows-split-test.yaml", `flows:
  - flow: supabase/functions/_flows/summarize_article.ts
    steps:
      publish:
        external: true
`)
	w := startWorker(t, db.Pool, split, worker.Config{})
	other := &sqlWorker{id: kit.NewUUID(), pool: db.Pool, flow: "summarize_article", steps: map[string]func(string) string{"publish": publish}}
	defer serve(other)()
	after := startRun(t, db.Pool, "summarize_article", article)
	if r := waitRun(t, db.Pool, after, 60*time.Second); r.Status != "completed" {
		t.Fatalf("after the split: %s (%s)", r.Status, r.Error)
	} else {
		jsonEqual(t, r.Output, want)
	}
	ours := w.WorkerIDs()["summarize_article"]
	for stepSlug, wantBy := range map[string]string{"words": ours, "summary": ours, "publish": other.id, "notify": ours} {
		var by string
		if err := db.Pool.QueryRow(ctx, `select last_worker_id::text from pgflow.step_tasks where run_id = $1::uuid and step_slug = $2`, after, stepSlug).Scan(&by); err != nil || by != wantBy {
			t.Errorf("%s served by %s (%v), want %s", stepSlug, by, err, wantBy)
		}
	}
	var runs int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'summarize_article' and status = 'completed'`).Scan(&runs); err != nil || runs != 2 {
		t.Errorf("%d completed runs of the flow (%v): the run before the split is kept beside the one after", runs, err)
	}
}

// serve --flows FOLDER follows the flow files themselves: an edit of a flow file's inline
// handler, then of a file it imports, is what the next task runs, and a flow file added to
// the folder is served, all without a restart; an edit that changes a flow's shape is
// refused with what changed, the flow loaded before serving on.
func TestServeReloadsAnEditedFlowFileAndItsImports(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	project := filepath.Join(workertest.RepoRoot(t), "testdata", "dslflows")
	if _, err := os.Stat(filepath.Join(project, "node_modules", "@pgflow", "dsl", "package.json")); err != nil {
		t.Fatalf("@pgflow/dsl is not installed in %s: run `make dsl-testdata`", project)
	}
	// A folder of the test project, so its files import the project's @pgflow/dsl.
	dir, err := os.MkdirTemp(project, "reload-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flow := func(greeting string) string {
		return "import { Flow } from '@pgflow/dsl';\nimport { name } from './name.ts';\n" +
			"export default new Flow({ slug: 'greeting' }).step({ slug: 's' }, () => '" + greeting + ", ' + name);\n"
	}
	write("greeting.ts", flow("hello"))
	write("name.ts", "export const name = 'Ada';\n")
	logs := &syncBuffer{}
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(serveCtx, worker.ServeConfig{
			FlowsPath: dir,
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
	outputOf := func(flow string) string {
		r := waitRun(t, db.Pool, startRun(t, db.Pool, flow, `{}`), 30*time.Second)
		return string(r.Output)
	}
	waitFor(t, 3*time.Minute, func() (bool, string) {
		var n int
		_ = db.Pool.QueryRow(ctx, `select count(*) from pgflow.workers where queue_name = 'greeting'`).Scan(&n)
		return n > 0, "the worker never registered:\n" + logs.String()
	})
	if got := outputOf("greeting"); got != `{"s": "hello, Ada"}` {
		t.Fatalf("before the edit: %s", got)
	}
	// A new handler is a new snapshot to compile: seconds, and a minute and more under the
	// race detector on a loaded machine.
	write("greeting.ts", flow("bonjour"))
	waitFor(t, 3*time.Minute, func() (bool, string) {
		return outputOf("greeting") == `{"s": "bonjour, Ada"}`, "the edited flow file was not picked up:\n" + logs.String()
	})
	write("name.ts", "export const name = 'Grace';\n")
	waitFor(t, 3*time.Minute, func() (bool, string) {
		return outputOf("greeting") == `{"s": "bonjour, Grace"}`, "the edited import of the flow file was not picked up:\n" + logs.String()
	})
	write("farewell.ts", "import { Flow } from '@pgflow/dsl';\nexport default new Flow({ slug: 'farewell' }).step({ slug: 's' }, () => 'bye');\n")
	waitFor(t, 3*time.Minute, func() (bool, string) {
		return strings.Contains(logs.String(), "reload: flow added"), "the added flow file was not served:\n" + logs.String()
	})
	if got := outputOf("farewell"); got != `{"s": "bye"}` {
		t.Errorf("the added flow: %s", got)
	}
	// A step added to a flow that exists: pgflow flows are immutable, so the reload is refused
	// with what changed, and the flow loaded before goes on serving.
	write("greeting.ts", strings.Replace(flow("hallo"), "() => 'hallo, ' + name);", "() => 'hallo, ' + name)\n  .step({ slug: 't', dependsOn: ['s'] }, () => 2);", 1))
	waitFor(t, 3*time.Minute, func() (bool, string) {
		return strings.Contains(logs.String(), "reload refused") && strings.Contains(logs.String(), `flow \"greeting\" in the database has another shape`),
			"a flow file whose flow changed shape was not refused:\n" + logs.String()
	})
	if got := outputOf("greeting"); got != `{"s": "bonjour, Grace"}` {
		t.Errorf("after a refused change of shape: %s, want the flow loaded before", got)
	}
}

// A flow served from its folder without a flows.yaml is granted nothing: a handler that
// fetches fails with a refusal that names the flow file and says a flows.yaml entry grants
// it; an environment variable of the worker's reads as undefined, as an ungranted one does.
func TestAFlowServedWithoutFlowsYAMLIsRefusedCapabilitiesSayingWhatGrantsThem(t *testing.T) {
	t.Setenv("PGFLOW_WASM_TEST_TOKEN", "secret")
	db := pgtest.NewDB(t)
	project := filepath.Join(workertest.RepoRoot(t), "testdata", "dslflows")
	dir, err := os.MkdirTemp(project, "nocaps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "reach.ts"), []byte(`import { Flow } from '@pgflow/dsl';
export const Fetch = new Flow({ slug: 'reach_http', maxAttempts: 1 })
  .step({ slug: 'get' }, async () => (await fetch('https://example.com/')).status);
export const Env = new Flow({ slug: 'reach_env', maxAttempts: 1 })
  .step({ slug: 'read' }, (_input, ctx) => ctx.env.PGFLOW_WASM_TEST_TOKEN ?? 'none');
`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := flowfile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, db.Pool, f, worker.Config{})
	id := startRun(t, db.Pool, "reach_http", `{}`)
	if r := waitRun(t, db.Pool, id, 60*time.Second); r.Status != "failed" {
		t.Fatalf("reach_http: %s, want failed", r.Status)
	}
	task := taskOf(t, db.Pool, id)
	for _, part := range []string{`http: step "get" of flow "reach_http" (`,
		"reach.ts, served without a flows.yaml: grant it in a flows.yaml `- flow:` entry, under `steps: {get: ...}`) may not make HTTP requests"} {
		if !strings.Contains(task.Error, part) {
			t.Errorf("reach_http failed with %q, want %q in it", task.Error, part)
		}
	}
	r := waitRun(t, db.Pool, startRun(t, db.Pool, "reach_env", `{}`), 60*time.Second)
	if r.Status != "completed" {
		t.Fatalf("reach_env: %s (%s)", r.Status, r.Error)
	}
	jsonEqual(t, r.Output, `{"read": "none"}`)
}
