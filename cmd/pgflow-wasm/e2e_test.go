package main_test

// End-to-end tests of the real binary: signals, kill -9, and what a user sees on bad input.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/testbin"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

var binary string // built once by TestMain

func TestMain(m *testing.M) {
	var err error
	if binary, err = testbin.Path(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

func repoRoot(t testing.TB) string {
	t.Helper()
	dir, _ := filepath.Abs("../..")
	return dir
}

func module(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("module %s is not built: run `make examples testmodules sandbox-testdata`", rel)
	}
	return p
}

func writeFile(t testing.TB, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// worker is a pgflow-wasm serve process whose JSON log goes to a file.
type worker struct {
	cmd *exec.Cmd
	log string
}

func startServe(t *testing.T, dbURL, flows string, extra ...string) *worker {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--flows", flows, "--database-url", dbURL, "--log-format", "json", "--log-level", "debug",
		"--min-poll-interval", "20ms", "--max-poll-interval", "200ms", "--heartbeat-interval", "500ms"}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, log: logPath}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("worker log %s:\n%s", logPath, tail(string(b), 4000))
		}
	})
	return w
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// taskKey names one attempt-independent task.
type taskKey struct {
	Run   string
	Step  string
	Index int
}

// events reads a worker's JSON log: the tasks it started and those whose completion it wrote.
func (w *worker) events(t *testing.T) (started, completed map[taskKey]int) {
	t.Helper()
	f, err := os.Open(w.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	started, completed = map[taskKey]int{}, map[taskKey]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg   string `json:"msg"`
			RunID string `json:"run_id"`
			Step  string `json:"step"`
			Index int    `json:"task_index"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.RunID == "" {
			continue // a line cut by kill -9
		}
		k := taskKey{line.RunID, line.Step, line.Index}
		switch line.Msg {
		case "task started":
			started[k]++
		case "task completed":
			completed[k]++
		}
	}
	return started, completed
}

func waitRunsDone(t *testing.T, db *pgtest.DB, flow string, n int, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	done := 0
	for time.Now().Before(deadline) {
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = $1 and status = 'completed'`, flow).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done == n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d of %d runs completed within %s", done, n, within)
}

// startSlowRuns starts n runs of the slow flow, each task tens of milliseconds of busy work
// (a loop of 90 million iterations: loops are cheap since the sandbox instruments modules).
func startSlowRuns(t *testing.T, db *pgtest.DB, n int) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `select pgflow.start_flow('slow', '{"iterations": 90000000}') from generate_series(1, $1)`, n); err != nil {
		t.Fatal(err)
	}
}

// slowTasks counts the slow flow's tasks that are completed and started.
func slowTasks(t *testing.T, db *pgtest.DB) (done, running int) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), `select count(*) filter (where status = 'completed'),
		count(*) filter (where status = 'started') from pgflow.step_tasks where flow_slug = 'slow'`).Scan(&done, &running); err != nil {
		t.Fatal(err)
	}
	return done, running
}

const slowFlows = `
flows:
  - slug: slow
    base_delay: 0
    steps:
      - {slug: w, module: "%s", timeout: 30}
`

func TestKillDashNineLosesNothingAndRerunsOnlyRunningTasks(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(slowFlows, module(t, "modules/testdata/oracle.wasm")))
	ctx := context.Background()
	const runs = 40
	first := startServe(t, db.URL, flows, "--concurrency", "4", "--batch-size", "4")
	db.WaitServing(t, "slow")
	startSlowRuns(t, db, runs)
	// Let it complete a few tasks and be in the middle of others, then kill it outright.
	deadline := time.Now().Add(60 * time.Second)
	for {
		done, running := slowTasks(t, db)
		if done >= 5 && running > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first worker did not get going: %d done, %d running", done, running)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	// A commit the dead worker had sent still completes on the server: wait until none of
	// its sessions is busy any more, then read what the database says was left running.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var busy int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity where datname = current_database()
			and pid <> pg_backend_pid() and backend_type = 'client backend' and state <> 'idle'`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions of the killed worker still busy after 30 s", busy)
		}
	}
	atKill := map[string]map[taskKey]bool{"started": {}, "completed": {}}
	rows, err := db.Pool.Query(ctx, `select run_id::text, step_slug, task_index, status from pgflow.step_tasks
		where flow_slug = 'slow' and status in ('started', 'completed')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k taskKey
		var status string
		if err := rows.Scan(&k.Run, &k.Step, &k.Index, &status); err != nil {
			t.Fatal(err)
		}
		atKill[status][k] = true
	}
	rows.Close()
	if len(atKill["started"]) == 0 {
		t.Fatal("no task was running when the worker was killed: the test proves nothing")
	}

	second := startServe(t, db.URL, flows, "--concurrency", "4", "--worker-stale-after", "3s", "--recovery-interval", "1s")
	waitRunsDone(t, db, "slow", runs, 120*time.Second)

	_, completed1 := first.events(t)
	started2, _ := second.events(t)
	for k := range started2 {
		if completed1[k] > 0 || atKill["completed"][k] {
			t.Errorf("task %v had completed before the kill but ran again", k)
		}
	}
	for k := range atKill["started"] {
		if started2[k] == 0 {
			t.Errorf("task %v was running at the kill but did not run again", k)
		}
	}
	var notOnce, wrongAttempt int
	if err := db.Pool.QueryRow(ctx, `
		select count(*) filter (where r.status <> 'completed' or t.status <> 'completed'),
		       count(*) filter (where t.attempts_count > 2)
		from pgflow.runs r join pgflow.step_tasks t on t.run_id = r.run_id where r.flow_slug = 'slow'`).Scan(&notOnce, &wrongAttempt); err != nil {
		t.Fatal(err)
	}
	if notOnce != 0 || wrongAttempt != 0 {
		t.Errorf("%d runs/tasks not completed, %d tasks attempted more than twice", notOnce, wrongAttempt)
	}
}

func TestSigtermDrainsAndExitsZero(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(slowFlows, module(t, "modules/testdata/oracle.wasm")))
	ctx := context.Background()
	const runs = 20
	w := startServe(t, db.URL, flows, "--concurrency", "4", "--drain-timeout", "30s")
	db.WaitServing(t, "slow")
	startSlowRuns(t, db, runs)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, running := slowTasks(t, db); running > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never started a task")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- w.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("worker exit after SIGTERM: %v (want exit code 0)", err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("worker still running 45 s after SIGTERM")
	}
	var running, deprecated int
	if err := db.Pool.QueryRow(ctx, `select (select count(*) from pgflow.step_tasks where flow_slug = 'slow' and status = 'started'),
		(select count(*) from pgflow.workers where queue_name = 'slow' and deprecated_at is not null)`).Scan(&running, &deprecated); err != nil {
		t.Fatal(err)
	}
	if running != 0 {
		t.Errorf("%d tasks left started after a graceful stop, want 0 (drained or handed back)", running)
	}
	if deprecated != 1 {
		t.Errorf("worker row not marked deprecated after the stop")
	}
	// Nothing lost: a new worker finishes every run.
	startServe(t, db.URL, flows, "--concurrency", "4")
	waitRunsDone(t, db, "slow", runs, 120*time.Second)
}

func TestBadInputsGiveOneClearErrorAndNonZeroExit(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	good := module(t, "modules/testdata/echo.wasm")
	unknownImport := module(t, "sandbox/testdata/build/unknown_import.wasm")
	cases := []struct {
		name  string
		args  func() []string
		wants []string
	}{
		{"malformed yaml", func() []string {
			return []string{"validate", "--flows", writeFile(t, "flows.yaml", "flows:\n  - slug: a\n    stepz: []\n")}
		}, []string{"flows.yaml:3:", `unknown key "stepz"`, `did you mean "steps"`}},
		{"missing module", func() []string {
			return []string{"validate", "--flows", writeFile(t, "flows.yaml", "flows:\n  - slug: a\n    steps:\n      - {slug: s, module: nope.wasm}\n")}
		}, []string{"flows.yaml:4:", `module "nope.wasm" not found`}},
		{"unknown import", func() []string {
			return []string{"validate", "--flows", writeFile(t, "flows.yaml", "flows:\n  - slug: a\n    steps:\n      - {slug: s, module: "+unknownImport+"}\n")}
		}, []string{"flows.yaml:4:", "import"}},
		{"dead database", func() []string {
			return []string{"serve", "--flows", writeFile(t, "flows.yaml", "flows:\n  - slug: a\n    steps:\n      - {slug: s, module: "+good+"}\n"),
				"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=3"}
		}, []string{"127.0.0.1:1", "is the server running?"}},
		{"no database url", func() []string {
			return []string{"start", "hello", "--database-url", ""}
		}, []string{"--database-url"}},
		{"database without pgflow", func() []string {
			return []string{"runs", "--database-url", pgtest.NewDB(t, pgtest.Empty()).URL}
		}, []string{"no pgflow schema", "pgflow-wasm db install"}},
		{"unknown flow", func() []string {
			return []string{"start", "no_such_flow", "--database-url", db.URL}
		}, []string{"no_such_flow", "not compiled"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(binary, tc.args()...)
			cmd.Env = append(os.Environ(), "DATABASE_URL=")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if err == nil {
				t.Fatalf("exit code 0, want non-zero; output:\n%s", out.String())
			}
			text := out.String()
			for _, w := range tc.wants {
				if !strings.Contains(text, w) {
					t.Errorf("output does not mention %q:\n%s", w, text)
				}
			}
			if n := strings.Count(strings.TrimSpace(text), "\n"); n > 3 {
				t.Errorf("want one clear error, got %d lines:\n%s", n+1, text)
			}
		})
	}
}

// run runs the binary and returns its stdout, stderr and exit code.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestStartWaitRunsAndRunTree(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: echo
    steps:
      - {slug: e, module: %q}
  - slug: doomed
    max_attempts: 1
    steps:
      - {slug: f, module: %q}
`, module(t, "modules/testdata/echo.wasm"), module(t, "modules/testdata/fail.wasm")))
	startServe(t, db.URL, flows, "--signal", "notify")
	db.WaitServing(t, "echo")
	dbEnv := []string{"DATABASE_URL=" + db.URL}

	out, errOut, code := runBinary(t, dbEnv, "start", "echo", "--input", `{"value": 0}`, "--wait", "--timeout", "1m")
	if code != 0 || strings.TrimSpace(out) != `{"e": 0}` {
		t.Fatalf("start --wait: exit %d, stdout %q, stderr %q; want 0 and {\"e\": 0}", code, out, errOut)
	}
	runID := strings.Fields(errOut)[1] // "run <id> completed in ..."
	if strings.Contains(errOut, "warning") {
		t.Errorf("start --wait warned although a worker serves the flow: %q", errOut)
	}

	input := writeFile(t, "input.json", `{}`)
	_, errOut, code = runBinary(t, dbEnv, "start", "doomed", "--input", "@"+input, "--wait")
	if code != 1 || !strings.Contains(errOut, "always fails") {
		t.Errorf("a failing run: exit %d, stderr %q; want 1 and the handler's message", code, errOut)
	}

	out, _, code = runBinary(t, dbEnv, "runs", "--flow", "doomed")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.Contains(lines[1], "failed") ||
		!regexp.MustCompile(`\s\w+: handler_error: always fails`).MatchString(lines[1]) {
		t.Errorf("runs --flow doomed: exit %d, want the header and one line naming the failed step:\n%s", code, out)
	}
	out, _, code = runBinary(t, dbEnv, "runs", "--flow", "echo")
	if code != 0 || !strings.Contains(out, runID) || !strings.Contains(out, "completed") {
		t.Errorf("runs --flow echo: exit %d:\n%s", code, out)
	}
	_, errOut, code = runBinary(t, dbEnv, "run", "not-a-uuid")
	if code != 1 || !strings.Contains(errOut, `"not-a-uuid" is not a run id`) {
		t.Errorf("run not-a-uuid: exit %d, %q", code, errOut)
	}
	out, _, code = runBinary(t, dbEnv, "run", runID)
	for _, want := range []string{"run " + runID + "  flow echo  completed", `output: {"e": 0}`, "e  single  completed", "[0] completed  attempt 1"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("run %s lacks %q (exit %d):\n%s", runID, want, code, out)
		}
	}
	if strings.Contains(out, "output: 0") {
		t.Errorf("run without --outputs shows task outputs:\n%s", out)
	}
	out, _, code = runBinary(t, dbEnv, "run", runID, "--outputs")
	if code != 0 || !strings.Contains(out, "[0] completed  attempt 1") || !strings.Contains(out, "      output: 0\n") {
		t.Errorf("run %s --outputs (exit %d):\n%s", runID, code, out)
	}
}

func TestFlagsBeatEnvironmentBeatsConfigFile(t *testing.T) {
	t.Parallel()
	broken := func(name string) string {
		return writeFile(t, name, "flows:\n  - slug: "+strings.TrimSuffix(name, ".yaml")+"\n    bad_key: 1\n")
	}
	fromConfig, fromEnv, fromFlag := broken("config_file.yaml"), broken("environment.yaml"), broken("flag.yaml")
	config := writeFile(t, "pgflow-wasm.yaml", "flows: "+fromConfig+"\n")

	_, errOut, _ := runBinary(t, nil, "validate", "--config", config)
	if !strings.Contains(errOut, fromConfig) {
		t.Errorf("with only --config, the file's flows should be used:\n%s", errOut)
	}
	_, errOut, _ = runBinary(t, []string{"PGFLOW_WASM_FLOWS=" + fromEnv}, "validate", "--config", config)
	if !strings.Contains(errOut, fromEnv) {
		t.Errorf("the environment should beat the config file:\n%s", errOut)
	}
	_, errOut, _ = runBinary(t, []string{"PGFLOW_WASM_FLOWS=" + fromEnv}, "validate", "--config", config, "--flows", fromFlag)
	if !strings.Contains(errOut, fromFlag) {
		t.Errorf("the flag should beat the environment:\n%s", errOut)
	}
}

// The README's quick start (db install, serve --signal notify, start --wait) on a server that
// offers the real pgmq 1.5.1, which has no enable_notify_insert.
func TestQuickStartOnTheRealPgmqWithNotify(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t, pgtest.ExtensionFiles(pgtest.RealPgmq(t)))
	db := cluster.NewDB(t, pgtest.Empty())
	dbEnv := []string{"DATABASE_URL=" + db.URL}
	out, errOut, code := runBinary(t, dbEnv, "db", "install", "--migrations", filepath.Join(repoRoot(t), schema.DefaultMigrationsDir))
	if code != 0 || !strings.Contains(out, "pgmq:          created pgmq 1.5.1 (real extension)") {
		t.Fatalf("db install: exit %d\n%s%s", code, out, errOut)
	}
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: chain
    steps:
      - {slug: a, module: %[1]q}
      - {slug: b, depends_on: [a], module: %[1]q}
`, module(t, "modules/testdata/oracle.wasm")))
	w := startServe(t, db.URL, flows, "--signal", "notify", "--notify-fallback", "1h", "--min-poll-interval", "1h", "--max-poll-interval", "1h")
	db.WaitServing(t, "chain")
	began := time.Now()
	out, errOut, code = runBinary(t, dbEnv, "start", "chain", "--input", `{"n": 1}`, "--wait", "--timeout", "1m")
	if code != 0 || !strings.Contains(out, `"b"`) {
		t.Fatalf("start --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// With hour-long polls, only notifications can have moved the run along.
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("a two-step run took %s: notifications did not wake the worker", took)
	}
	if log, _ := os.ReadFile(w.log); strings.Contains(string(log), "polling it instead") {
		t.Errorf("the worker fell back to polling on the real pgmq:\n%s", tail(string(log), 2000))
	}
}

// --fetch-leases takes auto, off or a number, from the command line or a config file where
// YAML reads a bare number as an integer.
func TestFetchLeasesTakesAutoOffOrANumberFromAnywhere(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.yaml") // serve stops there once the flags are read
	for _, c := range []struct {
		args    []string
		config  string
		wantErr string
	}{
		{args: []string{"--fetch-leases", "auto"}, wantErr: "file not found"},
		{args: []string{"--fetch-leases", "off"}, wantErr: "file not found"},
		{args: []string{"--fetch-leases", "3"}, wantErr: "file not found"},
		{config: "fetch-leases: 2\n", wantErr: "file not found"},
		{args: []string{"--fetch-leases", "0"}, wantErr: `--fetch-leases "0": want auto, off or a number of leases`},
		{config: "fetch-leases: many\n", wantErr: `--fetch-leases "many": want auto, off or a number of leases`},
	} {
		args := append([]string{"serve", "--flows", missing}, c.args...)
		if c.config != "" {
			args = append(args, "--config", writeFile(t, "leases.yaml", c.config))
		}
		_, errOut, code := runBinary(t, nil, args...)
		if code != 2 || !strings.Contains(errOut, c.wantErr) {
			t.Errorf("%v %q: exit %d, want 2 and %q:\n%s", c.args, c.config, code, c.wantErr, errOut)
		}
	}
}

// Workers killed outright while they run tasks of a step with max_attempts 1 cost no run:
// each killed worker's started tasks go back to the queue without an attempt failed, and a
// live worker runs them. Two workers serve; three times the one running tasks is killed
// with SIGKILL and a new one takes its place.
func TestKilledWorkersCostNoRunWithOneAttempt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: slow
    max_attempts: 1
    steps:
      - {slug: w, module: "%s", timeout: 30}
`, module(t, "modules/testdata/oracle.wasm")))
	const runs = 60
	ids := map[*worker][]string{}
	serve := func() *worker {
		w := startServe(t, db.URL, flows, "--concurrency", "4", "--batch-size", "4", "--liveness-grace", "1s", "--recovery-interval", "1s")
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(readFile(t, w.log), `"serving flow"`); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a worker did not serve within 60 s:\n%s", tail(readFile(t, w.log), 2000))
			}
		}
		ids[w] = workerIDs(t, w.log)
		return w
	}
	workers := []*worker{serve(), serve()}
	startSlowRuns(t, db, runs)
	hit := 0
	for kill := range 3 {
		// The victim: a worker that has tasks started right now.
		var victim *worker
		for deadline := time.Now().Add(60 * time.Second); victim == nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: no worker had a task started within 60 s", kill+1)
			}
			for _, w := range workers {
				var running int
				if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where flow_slug = 'slow' and status = 'started'
					and last_worker_id = any($1::text[]::uuid[])`, ids[w]).Scan(&running); err != nil {
					t.Fatal(err)
				}
				if running > 0 {
					victim = w
					hit += running
					break
				}
			}
		}
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = victim.cmd.Wait()
		for i, w := range workers {
			if w == victim {
				workers[i] = serve()
			}
		}
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var open int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'slow' and status = 'started'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs still open 3 minutes after the last kill", open, runs)
		}
	}
	var failed, requeued int
	if err := db.Pool.QueryRow(ctx, `select count(*) filter (where status = 'failed'),
		(select count(*) from pgflow.step_tasks where flow_slug = 'slow' and attempts_count > 1)
		from pgflow.runs where flow_slug = 'slow'`).Scan(&failed, &requeued); err != nil {
		t.Fatal(err)
	}
	t.Logf("3 workers killed with %d tasks started between them; %d tasks ran again", hit, requeued)
	if failed != 0 {
		var why string
		_ = db.Pool.QueryRow(ctx, `select coalesce(min(error_message), '') from pgflow.step_tasks where flow_slug = 'slow' and status = 'failed'`).Scan(&why)
		t.Errorf("%d of %d runs failed, e.g. %q", failed, runs, why)
	}
	if requeued == 0 {
		t.Errorf("no task ran a second time: the kills hit nothing running, the test proves little")
	}
}
