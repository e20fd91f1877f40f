package main_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// Three workers serve a flow scheduled every second; one is killed with SIGKILL halfway:
// every tick from the first to the last got exactly one run (a unique row per flow and tick
// decides, no leader), and every run completed.
func TestAScheduleStartsOneRunPerTickAcrossWorkers(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	flows := writeFile(t, "flows.yaml", fmt.Sprintf(`
flows:
  - slug: ticking
    schedule:
      cron: "* * * * * *"   # every second (a leading seconds field)
      input: {"from": "schedule"}
    steps:
      - {slug: s, module: %q}
`, module(t, "modules/testdata/echo.wasm")))
	workers := []*worker{startServe(t, db.URL, flows), startServe(t, db.URL, flows), startServe(t, db.URL, flows)}
	db.WaitServing(t, "ticking")
	time.Sleep(3 * time.Second)
	if err := workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	for _, w := range workers[1:] {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		_, _ = w.cmd.Process.Wait()
	}
	rows, err := db.Pool.Query(ctx, `select t.tick, t.run_id::text, r.status, r.input::text from pgflow_wasm.schedule_ticks t
		left join pgflow.runs r on r.run_id = t.run_id where t.flow_slug = 'ticking' order by t.tick`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev time.Time
	n := 0
	for rows.Next() {
		var tick time.Time
		var run, status, input *string
		if err := rows.Scan(&tick, &run, &status, &input); err != nil {
			t.Fatal(err)
		}
		n++
		if run == nil || status == nil || *status != "completed" || *input != `{"from": "schedule"}` {
			t.Errorf("tick %s: run %v status %v input %v, want a completed run of the schedule's input", tick, run, status, input)
		}
		if !prev.IsZero() && tick.Sub(prev) != time.Second {
			t.Errorf("ticks %s and %s: want one every second, none missed", prev, tick)
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
	if code != 0 || !regexp.MustCompile(`schedules:\s+ticking  "\* \* \* \* \* \*" \(UTC\)  next \S+  last `+regexp.QuoteMeta(prev.UTC().Format(time.RFC3339))+
		` \(run [0-9a-f-]{36}\)  \d+ in the last day`).MatchString(out) {
		t.Errorf("db status: exit %d, want the schedule with its next and last tick:\n%s%s", code, out, errOut)
	}
	if n < 5 || runs != n {
		t.Errorf("%d ticks recorded and %d runs: want one run per tick, at least 5", n, runs)
	}
}
