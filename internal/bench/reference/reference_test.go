// Package reference_test proves the Node reference worker (worker.mjs) speaks pgflow's
// protocol on a real database: it runs the worker as a subprocess, as the bench harness does.
package reference_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// script is worker.mjs relative to the repository root (the harness runs it from there).
const script = "internal/bench/reference/worker.mjs"

// checkNodeModules says what is missing for worker.mjs to import @pgflow/core and postgres.
func checkNodeModules(root string) error {
	for _, pkg := range []string{"@pgflow/core", "postgres"} {
		if _, err := os.Stat(filepath.Join(root, "node_modules", pkg, "package.json")); err != nil {
			return fmt.Errorf("%s is not installed in %s/node_modules: run `make node_modules`", pkg, root)
		}
	}
	return nil
}

// setup returns the repository root, failing the test when node or node_modules is missing.
func setup(t testing.TB) string {
	t.Helper()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH (the reference worker needs Node 20): %v", err)
	}
	if err := checkNodeModules(root); err != nil {
		t.Fatal(err)
	}
	return root
}

// worker is one running worker.mjs.
type refWorker struct {
	id     string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	lines  chan string // stdout lines after the ready line; closed at EOF
	exited chan error
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var readyLine = regexp.MustCompile(`^ready ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)

// startWorker runs worker.mjs against dbURL and returns once it printed its ready line.
func startWorker(t testing.TB, root, dbURL, flow string, extra ...string) *refWorker {
	t.Helper()
	args := append([]string{script, "--database-url", dbURL, "--flow", flow}, extra...)
	cmd := exec.Command("node", args...)
	cmd.Dir = root
	w := &refWorker{cmd: cmd, stderr: &lockedBuffer{}, lines: make(chan string, 16), exited: make(chan error, 1)}
	cmd.Stderr = w.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-w.exited
		}
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
		w.exited <- cmd.Wait() // after stdout is drained, as exec requires
	}()
	select {
	case line, ok := <-first:
		m := readyLine.FindStringSubmatch(line)
		if !ok || m == nil {
			t.Fatalf("first stdout line %q is not `ready <uuid>`; stderr:\n%s", line, w.stderr)
		}
		w.id = m[1]
	case <-time.After(time.Minute):
		t.Fatalf("no ready line within a minute; stderr:\n%s", w.stderr)
	}
	return w
}

// stop sends SIGTERM, expects exit status 0 with exactly one more stdout line,
// `done <completed> <failed>`, and returns the two counts.
func (w *refWorker) stop(t testing.TB) (completed, failed int) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	timeout := time.After(30 * time.Second)
	for collecting := true; collecting; {
		select {
		case line, ok := <-w.lines:
			if !ok {
				collecting = false
				break
			}
			rest = append(rest, line)
		case <-timeout:
			t.Fatalf("worker still running 30 s after SIGTERM; stderr:\n%s", w.stderr)
		}
	}
	if err := <-w.exited; err != nil {
		t.Fatalf("worker exit after SIGTERM: %v (want status 0); stderr:\n%s", err, w.stderr)
	}
	if len(rest) != 1 {
		t.Fatalf("stdout after the ready line: %q, want exactly one `done <completed> <failed>` line", rest)
	}
	if _, err := fmt.Sscanf(rest[0], "done %d %d", &completed, &failed); err != nil {
		t.Fatalf("last stdout line %q is not `done <completed> <failed>`: %v", rest[0], err)
	}
	return completed, failed
}

// execSQL runs SQL on the test database.
func execSQL(t testing.TB, db *pgtest.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// waitRuns waits until all n runs of flow reach status (completed or failed), failing early
// when a run reaches the other final status.
func waitRuns(t testing.TB, db *pgtest.DB, w *refWorker, flow, status string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var done, wrong, total int
		err := db.Pool.QueryRow(context.Background(), `
			select count(*) filter (where status = $2),
			       count(*) filter (where status in ('completed', 'failed') and status <> $2),
			       count(*)
			from pgflow.runs where flow_slug = $1`, flow, status).Scan(&done, &wrong, &total)
		if err != nil {
			t.Fatal(err)
		}
		if wrong > 0 {
			t.Fatalf("%d runs of %s ended other than %s; worker stderr:\n%s", wrong, flow, status, w.stderr)
		}
		if done == n && total == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes %d of %d runs of %s are %s; worker stderr:\n%s", done, n, flow, status, w.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dbTime reads one timestamp from the database (its clock, not ours).
func dbTime(t testing.TB, db *pgtest.DB, sql string) time.Time {
	t.Helper()
	var ts time.Time
	if err := db.Pool.QueryRow(context.Background(), sql).Scan(&ts); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return ts
}

// countWhere counts the rows of a query's single count column.
func countWhere(t testing.TB, db *pgtest.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestOneStepRuns(t *testing.T) {
	t.Parallel()
	root := setup(t)
	db := pgtest.NewDB(t)
	execSQL(t, db, `select pgflow.create_flow('ref', 3, 1, 60)`)
	execSQL(t, db, `select pgflow.add_step('ref', 's')`)
	execSQL(t, db, `select pgflow.start_flow('ref', '{}') from generate_series(1, 50)`)

	// Default polling options: the harness runs the worker this way.
	w := startWorker(t, root, db.URL, "ref")
	if got := countWhere(t, db, `select count(*) from pgflow.workers
		where worker_id = $1 and queue_name = 'ref' and function_name = 'reference-ts'`, w.id); got != 1 {
		t.Fatalf("pgflow.workers has %d rows for worker %s (queue ref, function reference-ts), want 1", got, w.id)
	}
	waitRuns(t, db, w, "ref", "completed", 50)

	if got := countWhere(t, db, `select count(*) from pgflow.runs
		where flow_slug = 'ref' and output = '{"s": {"ok": true}}'::jsonb`); got != 50 {
		var sample string
		_ = db.Pool.QueryRow(context.Background(), `select coalesce(output::text, 'null') from pgflow.runs
			where output is distinct from '{"s": {"ok": true}}'::jsonb limit 1`).Scan(&sample)
		t.Fatalf("%d of 50 runs have output {\"s\": {\"ok\": true}}; another has %s", got, sample)
	}
	if got := countWhere(t, db, `select count(*) from pgflow.step_tasks
		where flow_slug = 'ref' and status = 'completed' and last_worker_id = $1 and attempts_count = 1`, w.id); got != 50 {
		t.Fatalf("%d tasks completed by worker %s in one attempt, want 50", got, w.id)
	}
	if got := countWhere(t, db, `select count(*) from pgflow.workers
		where worker_id = $1 and last_heartbeat_at > started_at`, w.id); got != 1 {
		t.Fatalf("worker %s never sent a heartbeat", w.id)
	}
	if completed, failed := w.stop(t); completed != 50 || failed != 0 {
		t.Fatalf("worker said done %d %d, want done 50 0", completed, failed)
	}
}

func TestChainAfterMapStep(t *testing.T) {
	t.Parallel()
	root := setup(t)
	db := pgtest.NewDB(t)
	// m maps over the run input (3 tasks per run), then b and c each run once.
	execSQL(t, db, `select pgflow.create_flow('shape', 3, 1, 60)`)
	execSQL(t, db, `select pgflow.add_step('shape', 'm', step_type => 'map')`)
	execSQL(t, db, `select pgflow.add_step('shape', 'b', array['m'])`)
	execSQL(t, db, `select pgflow.add_step('shape', 'c', array['b'])`)
	execSQL(t, db, `select pgflow.start_flow('shape', '[1, 2, 3]') from generate_series(1, 20)`)

	w := startWorker(t, root, db.URL, "shape", "--max-poll-seconds", "1", "--batch-size", "7", "--max-concurrent", "3")
	waitRuns(t, db, w, "shape", "completed", 20)

	if got := countWhere(t, db, `select count(*) from pgflow.runs
		where flow_slug = 'shape' and output = '{"c": {"ok": true}}'::jsonb`); got != 20 {
		t.Fatalf("%d of 20 runs have output {\"c\": {\"ok\": true}}", got)
	}
	// Every run's map step ran as three tasks, one per element of the input array.
	if got := countWhere(t, db, `select count(*) from pgflow.step_tasks
		where flow_slug = 'shape' and step_slug = 'm' and status = 'completed'
		  and task_index between 0 and 2 and output = '{"ok": true}'::jsonb`); got != 60 {
		t.Fatalf("%d map tasks completed with output {\"ok\": true}, want 60 (3 per run)", got)
	}
	if completed, failed := w.stop(t); completed != 100 || failed != 0 {
		t.Fatalf("worker said done %d %d, want done 100 0 (5 tasks per run)", completed, failed)
	}
}

func TestHandlerErrorFailsTask(t *testing.T) {
	t.Parallel()
	root := setup(t)
	db := pgtest.NewDB(t)
	execSQL(t, db, `select pgflow.create_flow('bad', 1, 1, 60)`) // one attempt: the first failure fails the run
	execSQL(t, db, `select pgflow.add_step('bad', 's')`)
	execSQL(t, db, `select pgflow.start_flow('bad', '{}') from generate_series(1, 10)`)

	w := startWorker(t, root, db.URL, "bad", "--max-poll-seconds", "1", "--fail-steps", "s")
	waitRuns(t, db, w, "bad", "failed", 10)

	if got := countWhere(t, db, `select count(*) from pgflow.step_tasks
		where flow_slug = 'bad' and status = 'failed' and error_message = 'reference handler told to fail step s'`); got != 10 {
		t.Fatalf("%d of 10 tasks failed with the handler's message", got)
	}
	if completed, failed := w.stop(t); completed != 0 || failed != 10 {
		t.Fatalf("worker said done %d %d, want done 0 10", completed, failed)
	}
}

// TestStopFinishesBatch stops the worker in the middle of a backlog: every task it started
// must be completed (none left `started`), and its done line must match the database.
func TestStopFinishesBatch(t *testing.T) {
	t.Parallel()
	root := setup(t)
	db := pgtest.NewDB(t)
	execSQL(t, db, `select pgflow.create_flow('ref', 3, 1, 60)`)
	execSQL(t, db, `select pgflow.add_step('ref', 's')`)
	execSQL(t, db, `select pgflow.start_flow('ref', '{}') from generate_series(1, 2000)`)

	w := startWorker(t, root, db.URL, "ref")
	deadline := time.Now().Add(time.Minute)
	for countWhere(t, db, `select count(*) from pgflow.step_tasks where status = 'completed'`) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 20 tasks completed after a minute; stderr:\n%s", w.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	completed, failed := w.stop(t)

	inDB := countWhere(t, db, `select count(*) from pgflow.step_tasks where status = 'completed' and last_worker_id = $1`, w.id)
	if completed != inDB || failed != 0 {
		t.Fatalf("worker said done %d %d; the database has %d tasks completed by it", completed, failed, inDB)
	}
	if completed >= 2000 {
		t.Fatalf("worker completed all %d tasks before SIGTERM took effect: the test proves nothing", completed)
	}
	if started := countWhere(t, db, `select count(*) from pgflow.step_tasks where status = 'started'`); started != 0 {
		t.Fatalf("%d tasks left started after a graceful stop", started)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	root := setup(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no database", []string{"--flow", "ref"}, "--database-url is required"},
		{"no flow", []string{"--database-url", "postgres://x@localhost/db"}, "--flow is required"},
		{"not a URL", []string{"--database-url", "nonsense", "--flow", "ref"}, `--database-url "nonsense" is not a URL`},
		{"wrong scheme", []string{"--database-url", "mysql://x@localhost/db", "--flow", "ref"}, "must start with postgres:// or postgresql://"},
		{"bad slug", []string{"--database-url", "postgres://x@localhost/db", "--flow", "9lives"}, `--flow "9lives" is not a pgflow slug`},
		{"zero batch", []string{"--database-url", "postgres://x@localhost/db", "--flow", "ref", "--batch-size", "0"}, "--batch-size must be at least 1"},
		{"word vt", []string{"--database-url", "postgres://x@localhost/db", "--flow", "ref", "--vt", "two"}, `--vt wants a whole number, got "two"`},
		{"unknown option", []string{"--database-url", "postgres://x@localhost/db", "--flow", "ref", "--turbo"}, "Unknown option '--turbo'"},
		{"empty fail step", []string{"--database-url", "postgres://x@localhost/db", "--flow", "ref", "--fail-steps", "a,"}, `--fail-steps: "" is not a step slug`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("node", append([]string{script}, c.args...)...)
			cmd.Dir = root
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2; stderr:\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), "usage:") {
				t.Fatalf("stderr does not say %q followed by the usage:\n%s", c.want, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout must stay empty on bad input, got %q", stdout.String())
			}
		})
	}
}

func TestUnknownFlow(t *testing.T) {
	t.Parallel()
	root := setup(t)
	db := pgtest.NewDB(t)
	cmd := exec.Command("node", script, "--database-url", db.URL, "--flow", "nowhere")
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; stderr:\n%s", err, stderr.String())
	}
	if want := `flow "nowhere" is not in pgflow.flows`; !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr does not say %q:\n%s", want, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("no ready line expected, stdout: %q", stdout.String())
	}
}

func TestCheckNodeModules(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	err := checkNodeModules(empty)
	if err == nil || !strings.Contains(err.Error(), "run `make node_modules`") {
		t.Fatalf("checkNodeModules on a checkout without node_modules: %v, want an error saying run `make node_modules`", err)
	}
	if err := os.MkdirAll(filepath.Join(empty, "node_modules", "@pgflow", "core"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(empty, "node_modules", "@pgflow", "core", "package.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkNodeModules(empty); err == nil || !strings.Contains(err.Error(), "postgres is not installed") {
		t.Fatalf("checkNodeModules without postgres: %v, want an error naming postgres", err)
	}
}

// BenchmarkOneStepBacklog measures how many one-step tasks per second the reference
// completes when 5,000 runs are started at once, in one statement. The figure is timed by
// the database's clock, from the commit of the runs to the last run's completed_at, so the
// sparse polling for completion neither costs CPU nor blurs it.
//
//	go test ./internal/bench/reference/ -run '^$' -bench OneStepBacklog -benchtime 1x
func BenchmarkOneStepBacklog(b *testing.B) {
	const runs = 5000
	root := setup(b)
	db := pgtest.NewDB(b)
	execSQL(b, db, `select pgflow.create_flow('ref', 3, 1, 60)`)
	execSQL(b, db, `select pgflow.add_step('ref', 's')`)
	w := startWorker(b, root, db.URL, "ref")

	var elapsed time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		execSQL(b, db, `select pgflow.start_flow('ref', '{}') from generate_series(1, $1)`, runs)
		b.StartTimer()
		start := dbTime(b, db, `select clock_timestamp()`)
		want := (i + 1) * runs
		deadline := time.Now().Add(10 * time.Minute)
		for countWhere(b, db, `select count(*) from pgflow.runs where status = 'completed'`) < want {
			if time.Now().After(deadline) {
				b.Fatalf("runs not completed after 10 minutes; stderr:\n%s", w.stderr)
			}
			time.Sleep(100 * time.Millisecond)
		}
		elapsed += dbTime(b, db, `select max(completed_at) from pgflow.runs`).Sub(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*runs)/elapsed.Seconds(), "tasks/s") // ns/op is one whole backlog
	if completed, failed := w.stop(b); completed != b.N*runs || failed != 0 {
		b.Fatalf("worker said done %d %d, want done %d 0", completed, failed, b.N*runs)
	}
}
