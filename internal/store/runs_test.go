package store_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

const workerID = "00000000-0000-4000-8000-0000000000aa"

func exec(t *testing.T, db *pgtest.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestNoWorkerWarning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	exec(t, db, `select pgflow.create_flow('lonely')`)
	warning := func() string {
		t.Helper()
		w, err := open(t, db).FlowWorkers(ctx, "lonely")
		if err != nil {
			t.Fatal(err)
		}
		return w.NoWorkerWarning("lonely")
	}
	if w := warning(); !strings.Contains(w, "no live worker serves flow lonely (no worker has ever served it)") || !strings.Contains(w, "pgflow-wasm serve") {
		t.Errorf("without workers: %q", w)
	}
	exec(t, db, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1, 'lonely', 'test')`, workerID)
	if w := warning(); w != "" {
		t.Errorf("with a live worker: %q", w)
	}
	exec(t, db, `update pgflow.workers set last_heartbeat_at = now() - interval '2 minutes'`)
	if w := warning(); !strings.Contains(w, "the last heartbeat of a worker for it was 2m0s ago") {
		t.Errorf("with a silent worker: %q", w)
	}
	exec(t, db, `update pgflow.workers set last_heartbeat_at = now(), deprecated_at = now()`)
	if w := warning(); !strings.Contains(w, "no worker has ever served it") {
		t.Errorf("with a deprecated worker only: %q", w)
	}
	// A live worker of a drained process serves nothing until undrained.
	exec(t, db, `update pgflow.workers set deprecated_at = null`)
	proc := procctl.Self("c0000000-0000-4000-8000-000000000001", "test")
	if err := procctl.Register(ctx, db.Pool, proc, []string{workerID}); err != nil {
		t.Fatal(err)
	}
	if _, err := procctl.Drain(ctx, db.Pool, proc.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if w := warning(); !strings.Contains(w, "the 1 alive for it belong to drained worker processes") || !strings.Contains(w, "worker undrain") {
		t.Errorf("with a drained worker only: %q", w)
	}
	if _, err := procctl.Undrain(ctx, db.Pool, proc.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if w := warning(); w != "" {
		t.Errorf("with the worker undrained: %q", w)
	}
	exec(t, db, `update pgflow.workers set deprecated_at = now()`)
	// Another flow's worker does not serve this one; an unknown flow gets no warning
	// (starting its run says it does not exist).
	exec(t, db, `insert into pgflow.workers (worker_id, queue_name, function_name) values (gen_random_uuid(), 'other', 'test')`)
	if w := warning(); w == "" {
		t.Error("another flow's worker counted")
	}
	if w, err := open(t, db).FlowWorkers(ctx, "nope"); err != nil || w.NoWorkerWarning("nope") != "" {
		t.Errorf("unknown flow: %+v %v", w, err)
	}
}

// Outputs of tasks come back only when asked for, and the tree shows them.
func TestTreeOutputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	exec(t, db, `select pgflow.create_flow('shout'); select pgflow.add_step('shout', 'up')`)
	exec(t, db, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1, 'shout', 'test')`, workerID)
	id, err := store.Start(ctx, db.Pool, "shout", []byte(`{"word": "hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	// One task through pgflow's own protocol: read, start, complete.
	exec(t, db, `select `+db.StartTasks(t, `'shout'`, `array(select msg_id from pgmq.read('shout', 30, 1))`, `$1::uuid`), workerID)
	exec(t, db, `select pgflow.complete_task($1::uuid, 'up', 0, '{"word": "HI"}'::jsonb)`, id)

	plain, err := open(t, db).GetTree(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if o := plain.Steps[0].Tasks[0].Output; !o.Null {
		t.Errorf("output read without asking: %s", o.Text)
	}
	tree, err := open(t, db).GetTreeWith(ctx, id, store.TreeOptions{Outputs: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tree.RenderWith(&out, store.RenderOptions{MaxTasks: 10, Outputs: true})
	if !strings.Contains(out.String(), "└─ [0] completed  attempt 1") || !strings.Contains(out.String(), `      output: {"word": "HI"}`) {
		t.Errorf("tree:\n%s", out.String())
	}
}

// Errors of several lines stay inside the tree: every line starts with the tree's
// columns, and long ones are cut unless every task is listed.
func TestTreeKeepsMultiLineErrorsInside(t *testing.T) {
	t.Parallel()
	now := time.Now()
	long := "trap: unreachable\nstdout: line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7"
	tree := &store.Tree{
		Run: pgflowtype.Run{ID: "r", Flow: "f", Status: "failed", StartedAt: now, FailedAt: &now, Error: "first\nsecond", Input: []byte("{}")},
		Steps: []store.Step{
			{Slug: "a", Type: "single", Status: "failed", StartedAt: &now, FailedAt: &now, Error: "step failed\nbecause",
				Tasks: []store.Task{{Index: 0, Status: "failed", Attempts: 3, StartedAt: &now, FailedAt: &now, Error: long}}},
			{Slug: "b", Type: "single", Status: "created", DependsOn: []string{"a"}},
		},
	}
	var out bytes.Buffer
	tree.Render(&out, 10)
	text := out.String()
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, l := range lines[2:] {
		// After the run's header: every line belongs to the tree (a branch or its column).
		if !strings.HasPrefix(l, "├─ ") && !strings.HasPrefix(l, "│  ") && !strings.HasPrefix(l, "└─ ") && !strings.HasPrefix(l, "   ") && !strings.HasPrefix(l, "  ") {
			t.Errorf("line %d leaves the tree: %q\n%s", i+3, l, text)
		}
	}
	for _, want := range []string{
		"  error:  first\n          second\n",
		"│     error: step failed\n│            because\n",
		"│  └─ [0] failed  attempt 3",
		"│        error: trap: unreachable\n│               stdout: line 1\n",
		"│               ... 2 more lines (--all shows everything)\n",
		"└─ b  single  created    after a",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("tree lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	tree.Render(&out, 0)
	if !strings.Contains(out.String(), "line 7") || strings.Contains(out.String(), "more lines") {
		t.Errorf("with every task listed, errors are whole:\n%s", out.String())
	}
}

// pgflowtype.Run and worker ids are read with or without their hyphens, in either case, and come back
// in the form pgflow's tables print.
func TestParseIDAcceptsBothFormsAndCanonicalises(t *testing.T) {
	const canonical = "0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b"
	for _, in := range []string{canonical, "0B7C4A52-2F6E-4D8A-9A1B-7C8D9E0F1A2B", "0b7c4a522f6e4d8a9a1b7c8d9e0f1a2b", "0B7C4A522F6E4D8A9A1B7C8D9E0F1A2B"} {
		if got, ok := store.ParseID(in); !ok || got != canonical {
			t.Errorf("ParseID(%q) = %q, %v; want %q", in, got, ok, canonical)
		}
	}
	for _, bad := range []string{"", "not-a-uuid", "0b7c4a52-2f6e-4d8a-9a1b7c8d9e0f1a2b", "0b7c4a52-2f6e4d8a-9a1b-7c8d9e0f1a2b0",
		"{0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2b}", "0b7c4a52-2f6e-4d8a-9a1b-7c8d9e0f1a2g", "0b7c4a522f6e4d8a9a1b7c8d9e0f1a2"} {
		if got, ok := store.ParseID(bad); ok {
			t.Errorf("ParseID(%q) = %q, accepted", bad, got)
		}
	}
}

// A run is found by its id in either form; `run` and the dashboard's links agree.
func TestGetReadsAnIdWithoutHyphens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	exec(t, db, `select pgflow.create_flow('plain'); select pgflow.add_step('plain', 'only')`)
	id, err := store.Start(ctx, db.Pool, "plain", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, db)
	r, err := s.Get(ctx, strings.ToUpper(strings.ReplaceAll(id, "-", "")))
	if err != nil || r.ID != id {
		t.Fatalf("Get without hyphens: %+v %v", r, err)
	}
	if _, err := s.Get(ctx, "not-a-uuid"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"not-a-uuid" is not a run id`) {
		t.Errorf("a malformed id: %v", err)
	}
	if _, err := s.Get(ctx, "00000000-0000-4000-8000-000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a run that does not exist: %v", err)
	}
}

// One rule says whether a worker is alive: the workers page and `start`'s warning agree, on
// a fresh heartbeat, a stale one, a stopped worker (pgflow 0.10+) and a deprecated one.
func TestOneLivenessRuleForEveryReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	exec(t, db, `select pgflow.create_flow('watched')`)
	exec(t, db, `insert into pgflow.workers (worker_id, queue_name, function_name) values ($1, 'watched', 'test')`, workerID)
	s := open(t, db).WithStaleAfter(10 * time.Second)
	look := func() (alive bool, serving int) {
		t.Helper()
		page, err := s.Workers(ctx, "", 10)
		page.Workers = ownWorkers(page.Workers)
		if err != nil || len(page.Workers) != 1 {
			t.Fatalf("workers: %+v %v", page.Workers, err)
		}
		fw, err := s.FlowWorkers(ctx, "watched")
		if err != nil {
			t.Fatal(err)
		}
		return page.Workers[0].Alive, fw.Serving
	}
	if alive, serving := look(); !alive || serving != 1 {
		t.Errorf("a fresh heartbeat: alive %v, serving %d", alive, serving)
	}
	exec(t, db, `update pgflow.workers set last_heartbeat_at = now() - interval '11 seconds'`)
	if alive, serving := look(); alive || serving != 0 {
		t.Errorf("a heartbeat older than the threshold: alive %v, serving %d", alive, serving)
	}
	s = s.WithStaleAfter(time.Minute)
	if alive, serving := look(); !alive || serving != 1 {
		t.Errorf("the same heartbeat under a longer threshold: alive %v, serving %d", alive, serving)
	}
	exec(t, db, `update pgflow.workers set deprecated_at = now()`)
	if alive, serving := look(); !alive || serving != 0 {
		t.Errorf("deprecated: alive %v (it finishes its tasks), serving %d (it takes none)", alive, serving)
	}
	if s.Protocol().StoppedAt {
		exec(t, db, `update pgflow.workers set deprecated_at = null, stopped_at = now()`)
		if alive, serving := look(); alive || serving != 0 {
			t.Errorf("stopped: alive %v, serving %d", alive, serving)
		}
	}
}

// A list keeps one line per run whatever its error holds, and names the failing step.
func TestErrorLineIsOneLineNamingTheStep(t *testing.T) {
	t.Parallel()
	r := pgflowtype.Run{FailedStep: "charge", Error: "handler_error: card declined\n  at charge (charge.ts:3:9)\n\tcode 402"}
	if got, want := r.ErrorLine(200), "charge: handler_error: card declined at charge (charge.ts:3:9) code 402"; got != want {
		t.Errorf("ErrorLine = %q, want %q", got, want)
	}
	if got := r.ErrorLine(20); got != "charge: handler_err…" {
		t.Errorf("cut ErrorLine = %q", got)
	}
	if got := (&pgflowtype.Run{Status: "completed"}).ErrorLine(70); got != "" {
		t.Errorf("a completed run's error line: %q", got)
	}
}

// A skipped step says why, in words (pgflow 0.14+ records the reason).
func TestTreeSaysWhyAStepWasSkipped(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tree := &store.Tree{
		Run: pgflowtype.Run{ID: "r", Flow: "f", Status: "completed", StartedAt: now, CompletedAt: &now, Input: []byte("{}"), Output: []byte("{}")},
		Steps: []store.Step{
			{Slug: "check", Type: "single", Status: "skipped", SkipReason: "condition_unmet"},
			{Slug: "notify", Type: "single", Status: "skipped", SkipReason: "dependency_skipped", DependsOn: []string{"check"}},
			{Slug: "flaky", Type: "single", Status: "skipped", SkipReason: "handler_failed"},
		},
	}
	var out bytes.Buffer
	tree.Render(&out, 10)
	for _, want := range []string{
		"├─ check  single  skipped",
		"│     why: its condition (if / if_not in flows.yaml) did not match, and when_unmet says skip\n",
		"│     why: it depends on check, which was skipped with skip-cascade\n",
		"      why: its handler failed its last attempt, and when_exhausted says skip: the run went on without it\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tree lacks %q:\n%s", want, out.String())
		}
	}
}
