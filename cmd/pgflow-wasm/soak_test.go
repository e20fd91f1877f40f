package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// SoakSecondsEnv sets how long the soak test starts runs for (default 30).
const SoakSecondsEnv = "SOAK_SECONDS"

// The soak test: several worker processes serve a steady stream of map and chain runs on a
// server whose autovacuum never rests, while one worker is killed with SIGKILL and the server
// crashes and restarts. Every handler is the oracle, and the database's audit trigger
// records every task transition; at the end:
//   - every run completed, and within 10 s of the last fault (or of its own start);
//   - no task completed twice; no output belongs to another task or to a superseded attempt;
//     every handler got the input pgflow builds for it.
func TestSoakKillAndCrashLoseNothingAndWriteEachOutcomeOnce(t *testing.T) {
	seconds := 30
	if s := os.Getenv(SoakSecondsEnv); s != "" {
		var err error
		if seconds, err = strconv.Atoi(s); err != nil || seconds < 6 {
			t.Fatalf("%s=%q: want a number of seconds, at least 6", SoakSecondsEnv, s)
		}
	}
	cluster := pgtest.NewCluster(t, pgtest.Settings(map[string]string{
		"autovacuum_naptime":              "1",
		"autovacuum_vacuum_threshold":     "20",
		"autovacuum_vacuum_scale_factor":  "0.01",
		"autovacuum_analyze_threshold":    "20",
		"autovacuum_analyze_scale_factor": "0.01",
		"autovacuum_vacuum_cost_delay":    "0",
	}))
	db := cluster.NewDB(t)
	ctx := context.Background()
	oracle := module(t, "modules/testdata/oracle.wasm")
	// A 5 s timeout: a pgmq.read whose reply the crash lost hides its messages for the
	// step's timeout + 2 s (nobody knows their ids to show them again), and the runs open at
	// the crash must finish within 10 s of it.
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: soak_map
    max_attempts: 10
    base_delay: 0
    timeout: 5
    steps:
      - {slug: each, type: map, module: %[1]q}
      - {slug: total, depends_on: [each], module: %[1]q}
  - slug: soak_chain
    max_attempts: 10
    base_delay: 0
    timeout: 5
    steps:
      - {slug: a, module: %[1]q}
      - {slug: b, depends_on: [a], module: %[1]q}
      - {slug: c, depends_on: [b], module: %[1]q}
      - {slug: d, depends_on: [c], module: %[1]q}
`, oracle))
	logs := map[*exec.Cmd]string{}
	// Workers under both signals: under notify every insert also wakes the fetch loops,
	// beside the claims that start successors in their predecessor's transaction.
	serve := func(signal string) *exec.Cmd {
		logPath := filepath.Join(t.TempDir(), "worker.log")
		logFile, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary, "serve", "--flows", flows, "--database-url", db.URL, "--log-format", "json",
			"--signal", signal, "--concurrency", "8", "--batch-size", "8", "--max-poll-interval", "1s")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logs[cmd] = logPath
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logFile.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("worker log %s:\n%s", logPath, tail(string(b), 3000))
			}
		})
		return cmd
	}
	workers := []*exec.Cmd{serve("notify"), serve("polling"), serve("notify")}
	db.WaitServing(t, "soak_chain")

	// The stream: every 100 ms a map run over four elements and a chain run, each task under a
	// millisecond of work but, once a second, one map element of a few hundred milliseconds
	// (so that the faults find tasks running).
	var produced int
	var produceErr error
	var wg sync.WaitGroup
	wg.Add(1)
	stopAt := time.Now().Add(time.Duration(seconds) * time.Second)
	go func() {
		defer wg.Done()
		for i := 0; time.Now().Before(stopAt); i++ {
			time.Sleep(100 * time.Millisecond)
			// Every tenth map run has one long element, about 0.1 s of work alone (ten times that
			// on a machine busy with other test packages, still well inside its 5 s timeout).
			_, err := db.Pool.Exec(ctx, `select pgflow.start_flow('soak_map', (select jsonb_agg(jsonb_build_object('iterations',
					  case when $1::int % 10 = 0 and k = 0 then 200000000 else 30000 end, 'i', $1::int * 4 + k)) from generate_series(0, 3) k)),
				pgflow.start_flow('soak_chain', jsonb_build_object('iterations', 30000, 'i', $1::int))`, i)
			switch {
			case err == nil:
				produced += 2
			case !dberr.Transient(err):
				produceErr = err
				return
			}
			// During the crash starting a run fails; the stream goes on when the server is back.
		}
	}()

	// Fault 1: a worker killed outright while it runs a task, a third of the way in; a new one
	// takes its place. The victim is whichever worker runs a long task: under fetch leases
	// (automatic with several workers) one worker may read every task of a light stream.
	time.Sleep(time.Duration(seconds) * time.Second / 3)
	byID := map[string]*exec.Cmd{}
	var ids []string
	for _, w := range workers {
		for _, id := range workerIDs(t, logs[w]) {
			byID[id] = w
			ids = append(ids, id)
		}
	}
	var victimID string
	for busy := time.Now().Add(20 * time.Second); victimID == "" && time.Now().Before(busy); time.Sleep(time.Millisecond) {
		// One of the long map elements, started moments ago: it still runs at the kill.
		err := db.Pool.QueryRow(ctx, `select st.last_worker_id::text from pgflow.step_tasks st join pgflow.runs r on r.run_id = st.run_id
			where st.status = 'started' and st.last_worker_id = any($1::text[]::uuid[]) and st.step_slug = 'each'
			  and (r.input -> st.task_index ->> 'iterations')::bigint > 1000000 and st.started_at > now() - interval '100 milliseconds'
			limit 1`, ids).Scan(&victimID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	if victimID == "" {
		t.Fatal("no worker started a long task within 20 s")
	}
	victim := byID[victimID]
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	t.Logf("killed worker %v at %s", workerIDs(t, logs[victim]), killedAt.Format("15:04:05.000"))
	_ = victim.Wait()
	serve("polling")
	// Fault 2: the server crashes (immediate shutdown) and restarts, two thirds of the way in.
	time.Sleep(time.Until(killedAt.Add(time.Duration(seconds) * time.Second / 3)))
	crashCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cluster.Crash(crashCtx); err != nil {
		t.Fatal(err)
	}
	lastFault := time.Now()
	t.Logf("the server crashed and is back at %s", lastFault.Format("15:04:05.000"))
	wg.Wait()
	if produceErr != nil {
		t.Fatalf("starting runs: %v", produceErr)
	}

	deadline := time.Now().Add(2 * time.Minute)
	for {
		var open int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where status = 'started' and flow_slug like 'soak%'`).Scan(&open); err != nil {
			if !dberr.Transient(err) {
				t.Fatal(err)
			}
		} else if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs still open 2 minutes after the stream ended", open)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var runs, completed, late, tasks, retried int
	var worstAfterFault, worstRun float64
	if err := db.Pool.QueryRow(ctx, `
		select count(*), count(*) filter (where status = 'completed'),
		       count(*) filter (where completed_at > greatest(started_at, $1::timestamptz) + interval '10 seconds'),
		       coalesce(max(extract(epoch from completed_at - $1::timestamptz)) filter (where started_at < $1), 0),
		       coalesce(max(extract(epoch from completed_at - started_at)), 0),
		       (select count(*) from pgflow.step_tasks where flow_slug like 'soak%'),
		       (select count(*) from pgflow.step_tasks where flow_slug like 'soak%' and attempts_count > 1)
		from pgflow.runs where flow_slug like 'soak%'`, lastFault).
		Scan(&runs, &completed, &late, &worstAfterFault, &worstRun, &tasks, &retried); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs (%d started by the stream), %d tasks, %d of them run more than once; slowest run %.1f s; "+
		"runs open at the last fault finished within %.1f s of it", runs, produced, tasks, retried, worstRun, worstAfterFault)
	// A start whose commit landed just before the crash reports an error: runs >= produced.
	if runs < produced || completed != runs {
		t.Errorf("%d runs started, %d in the database, %d completed", produced, runs, completed)
	}
	if late > 0 {
		t.Errorf("%d runs finished more than 10 s after the last fault (or their own start); the slowest:\n%s", late, lateRuns(t, db, lastFault))
	}
	var requeuedAfter float64
	if err := db.Pool.QueryRow(ctx, `select coalesce(max(extract(epoch from at - $1::timestamptz)), -1) from pgtest_audit.transitions
		where new_status = 'started' and attempts_count = 2 and at < $2::timestamptz`, killedAt, lastFault).Scan(&requeuedAfter); err != nil {
		t.Fatal(err)
	}
	t.Logf("the killed worker's tasks ran again within %.1f s of the kill", requeuedAfter)
	audit, err := db.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit: %d transitions, %d outputs checked by the oracle", audit.Transitions, audit.OracleTasks)
	if audit.OracleTasks != tasks {
		t.Errorf("the oracle checked %d of %d tasks", audit.OracleTasks, tasks)
	}
	if p := audit.Problems(); len(p) > 0 {
		t.Errorf("audit: %v", p)
	}
	if retried == 0 {
		t.Errorf("no task ran twice: the faults hit nothing running, the test proves little")
	}
}

// lateRuns describes the slowest runs that finished late: their tasks and every transition.
func lateRuns(t *testing.T, db *pgtest.DB, lastFault time.Time) string {
	rows, err := db.Pool.Query(context.Background(), `
		with late as (
		  select run_id, started_at, completed_at from pgflow.runs
		  where completed_at > greatest(started_at, $1::timestamptz) + interval '10 seconds'
		  order by completed_at - started_at desc limit 3)
		select 'run ' || l.run_id || ' started ' || to_char(l.started_at, 'HH24:MI:SS.MS') || ' completed ' || to_char(l.completed_at, 'HH24:MI:SS.MS') ||
		       coalesce((select string_agg(format(E'\n  %s[%s] %s -> %s attempt %s worker %s at %s', a.step_slug, a.task_index, a.old_status, a.new_status,
		                                         a.attempts_count, left(a.last_worker_id::text, 8), to_char(a.at, 'HH24:MI:SS.MS')), '' order by a.id)
		                 from pgtest_audit.transitions a where a.run_id = l.run_id), '') ||
		       coalesce((select string_agg(format(E'\n  task %s[%s] %s queued %s started %s msg %s', st.step_slug, st.task_index, st.status,
		                                         to_char(st.queued_at, 'HH24:MI:SS.MS'), to_char(st.started_at, 'HH24:MI:SS.MS'), st.message_id), '')
		                 from pgflow.step_tasks st where st.run_id = l.run_id), '')
		from late l`, lastFault)
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("last fault at %s\n%s", lastFault.Format("15:04:05.000"), strings.Join(lines, "\n"))
}

// workerIDs reads the pgflow.workers ids a worker logged when it started serving.
func workerIDs(t *testing.T, logPath string) []string {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(string(b), "\n") {
		var l struct {
			Msg      string `json:"msg"`
			WorkerID string `json:"worker_id"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving flow" {
			ids = append(ids, l.WorkerID)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("%s names no worker id", logPath)
	}
	return ids
}
