package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// need014 skips a test of pgflow 0.14's behaviour on an older database.
func need014(t *testing.T, db *pgtest.DB) {
	t.Helper()
	p, err := schema.DetectPgflow(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Conditions {
		t.Skip("needs pgflow 0.14 (this database has " + p.String() + "): run with PGFLOW_WASM_MIGRATIONS=../shared/pgflow/0.14.1/migrations, as `make test-pgflow-014` does")
	}
}

// On pgflow 0.14 a failed task may skip its step and let the run go on (when_exhausted), and
// an output a dependent map cannot take comes back as a failed task, not as no row: the
// worker reads both right and says so.
func TestPgflow014OutcomesAreReadRight(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	need014(t, db)
	f := flows(t, `
flows:
  - slug: skipping
    max_attempts: 1
    steps:
      - {slug: bad, module: "{{fail}}", when_exhausted: skip}
      - {slug: after, depends_on: [bad], module: "{{oracle}}"}
  - slug: violating
    max_attempts: 1
    steps:
      - {slug: object, module: "{{echo}}"}
      - {slug: each, type: map, depends_on: [object], module: "{{echo_map}}"}
`)
	logs := &syncBuffer{}
	startWorker(t, db.Pool, f, worker.Config{Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})

	skipped := startRun(t, db.Pool, "skipping", `{"n": 1}`)
	if r := waitRun(t, db.Pool, skipped, 30*time.Second); r.Status != "completed" {
		t.Errorf("a run whose failing step is skipped: %s (%s), want completed", r.Status, r.Error)
	}
	var stepStatus string
	if err := db.Pool.QueryRow(context.Background(), `select status from pgflow.step_states where run_id = $1::uuid and step_slug = 'bad'`,
		skipped).Scan(&stepStatus); err != nil || stepStatus != "skipped" {
		t.Errorf("step bad: %s %v, want skipped", stepStatus, err)
	}
	violated := startRun(t, db.Pool, "violating", `{"value": {"not": "an array"}}`)
	if r := waitRun(t, db.Pool, violated, 30*time.Second); r.Status != "failed" {
		t.Errorf("an object into a map step: %s, want the run failed", r.Status)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, want := range []string{
		"its step is skipped (when_exhausted) and the run goes on",
		"pgflow refused the output: a dependent map step needs an array",
		"[TYPE_VIOLATION]",
	} {
		for !strings.Contains(logs.String(), want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the worker's log does not say %q:\n%s", want, logs)
		}
	}
}
