package main_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// Three workers serve a flow scheduled every second (every minute for
// PGFLOW_WASM_SCHEDULE_MINUTES minutes, `make test-schedule`); one is killed with SIGKILL halfway:
// every tick from the first to the last got exactly one run (a unique row per flow and tick
// decides, no leader), and every run completed.
func TestAScheduleStartsOneRunPerTickAcrossWorkers(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	// Short form: a tick a second for 7 s. Long form: the issue's, "* * * * *" for N minutes.
	cron, every, before, after := "* * * * * *", time.Second, 3*time.Second, 4*time.Second
	if m, _ := strconv.Atoi(os.Getenv("PGFLOW_WASM_SCHEDULE_MINUTES")); m > 0 {
		cron, every = "* * * * *", time.Minute
		before, after = time.Duration(m)*time.Minute/2, time.Duration(m)*time.Minute/2
	}
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: ticking
    schedule:
      cron: %q
      input: {"from": "schedule"}
    steps:
      - {slug: s, module: %q}
`, cron, module(t, "modules/testdata/echo.wasm")))
	workers := []*worker{startServe(t, db.URL, flows), startServe(t, db.URL, flows), startServe(t, db.URL, flows)}
	db.WaitServing(t, "ticking")
	began := time.Now()
	time.Sleep(before)
	if err := workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(after)
	// A kill that lands in the middle of a fetch leaves that tick's task to the survivors:
	// visible again at once but with no notification (their next poll, within the notify
	// fallback), or started by the dead worker (recovery). Let them finish it.
	settled := time.Now().Add(30 * time.Second)
	for {
		var stuck int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'ticking'
			and status <> 'completed' and started_at < now() - interval '1 second'`).Scan(&stuck); err != nil {
			t.Fatal(err)
		}
		if stuck == 0 || time.Now().After(settled) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	ended := time.Now()
	for _, w := range workers[1:] {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		_, _ = w.cmd.Process.Wait()
	}
	// The settling above waits for runs older than a second: one started in the last second
	// before the workers stopped may not have ended (the next worker to serve the flow runs
	// it). Two seconds: the settling's last read and ended are not the same instant.
	rows, err := db.Pool.Query(ctx, `select t.tick, t.run_id::text, r.status, r.input::text,
		coalesce(r.started_at >= $1::timestamptz - interval '2 seconds', false)
		from pgflow_wasm.schedule_ticks t left join pgflow.runs r on r.run_id = t.run_id where t.flow_slug = 'ticking' order by t.tick`, ended)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev time.Time
	n := 0
	for rows.Next() {
		var tick time.Time
		var run, status, input *string
		var last bool
		if err := rows.Scan(&tick, &run, &status, &input, &last); err != nil {
			t.Fatal(err)
		}
		n++
		switch {
		case run == nil || status == nil || input == nil:
			t.Errorf("tick %s: no run recorded, want one", tick)
		case *input != `{"from": "schedule"}`:
			t.Errorf("tick %s: run %s has input %s, want the schedule's", tick, *run, *input)
		case *status != "completed" && !(last && *status == "started"):
			t.Errorf("tick %s: run %s is %s, want completed", tick, *run, *status)
		}
		if !prev.IsZero() && tick.Sub(prev) != every {
			t.Errorf("ticks %s and %s: want one every %s, none missed", prev, tick, every)
		}
		prev = tick
	}
	var runs int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'ticking'`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ticks, %d runs", n, runs)
	out, errOut, code := runBinary(t, []string{"DATABASE_URL=" + db.URL}, "flow", "list", "--flows", flows)
	if code != 0 || !strings.Contains(out, "ticking") || !strings.Contains(out, prev.UTC().Format(time.RFC3339)) {
		t.Errorf("flow list: exit %d, want the last tick %s:\n%s%s", code, prev.UTC().Format(time.RFC3339), out, errOut)
	}
	out, errOut, code = runBinary(t, nil, "db", "status", "--database-url", db.URL, "--flows", flows)
	if code != 0 || !regexp.MustCompile(`schedules:\s+ticking  `+regexp.QuoteMeta(strconv.Quote(cron))+` \(UTC\)  next \S+  last `+regexp.QuoteMeta(prev.UTC().Format(time.RFC3339))+
		` \(run [0-9a-f-]{36}\)  \d+ in the last day`).MatchString(out) {
		t.Errorf("db status: exit %d, want the schedule with its next and last tick:\n%s%s", code, out, errOut)
	}
	// Every tick between the workers' start and their stop, exactly: a minute's worth of
	// them in the long form is the "5 minutes: exactly 5 runs".
	want := int(ended.Truncate(every).Sub(began.Truncate(every)) / every)
	t.Logf("%d ticks of %s expected between %s and %s", want, every, began.Format(time.TimeOnly), ended.Format(time.TimeOnly))
	long := every == time.Minute // the short form's workers start ticking a second or two apart
	if n < 5 || runs != n || long && (n < want-1 || n > want+1) {
		t.Errorf("%d ticks recorded and %d runs: want one run per tick, %d (±1 at the edges) and at least 5", n, runs, want)
	}
}
