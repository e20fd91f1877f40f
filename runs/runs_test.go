package runs_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/runs"
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
		w, err := runs.FlowWorkers(ctx, db.Pool, "lonely")
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
	// Another flow's worker does not serve this one; an unknown flow gets no warning
	// (starting its run says it does not exist).
	exec(t, db, `insert into pgflow.workers (worker_id, queue_name, function_name) values (gen_random_uuid(), 'other', 'test')`)
	if w := warning(); w == "" {
		t.Error("another flow's worker counted")
	}
	if w, err := runs.FlowWorkers(ctx, db.Pool, "nope"); err != nil || w.NoWorkerWarning("nope") != "" {
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
	id, err := runs.Start(ctx, db.Pool, "shout", []byte(`{"word": "hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	// One task through pgflow's own protocol: read, start, complete.
	exec(t, db, `select `+db.StartTasks(t, `'shout'`, `array(select msg_id from pgmq.read('shout', 30, 1))`, `$1::uuid`), workerID)
	exec(t, db, `select pgflow.complete_task($1::uuid, 'up', 0, '{"word": "HI"}'::jsonb)`, id)

	plain, err := runs.GetTree(ctx, db.Pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Steps[0].Tasks[0].Output != nil {
		t.Errorf("output read without asking: %s", plain.Steps[0].Tasks[0].Output)
	}
	tree, err := runs.GetTreeWith(ctx, db.Pool, id, runs.TreeOptions{Outputs: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tree.RenderWith(&out, runs.RenderOptions{MaxTasks: 10, Outputs: true})
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
	tree := &runs.Tree{
		Run: runs.Run{ID: "r", Flow: "f", Status: "failed", StartedAt: now, FailedAt: &now, Error: "first\nsecond", Input: []byte("{}")},
		Steps: []runs.StepNode{
			{Slug: "a", Type: "single", Status: "failed", StartedAt: &now, FailedAt: &now, Error: "step failed\nbecause",
				Tasks: []runs.TaskNode{{Index: 0, Status: "failed", Attempts: 3, StartedAt: &now, FailedAt: &now, Error: long}}},
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
