package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// conditionFlows has a root step, a dependent step, a map step and a step with an `if:`.
// The run's plan is "free", so `premium` (if plan is pro) is skipped: it never runs, and
// `report`, which depends on it, sees no key for it.
const conditionFlows = `
flows:
  - slug: plans
    steps:
      - {slug: start, module: %[1]q}
      - {slug: nums, module: %[2]q}
      - {slug: doubled, type: map, depends_on: [nums], module: %[3]q}
      - {slug: premium, depends_on: [start], module: %[1]q}
      - {slug: report, depends_on: [doubled, premium], module: %[1]q}
`

const premiumCondition = `      - {slug: premium, depends_on: [start], module: %[1]q, if: {"start": {"input": {"run": {"plan": "pro"}}}}}`

// The README's path on pgflow 0.14.1: a fresh plain PostgreSQL, `db install --migrations`,
// `serve`, `start --wait`; then the same file without the condition, unchanged, on 0.8.1.
func TestAFlowWithAConditionOnPgflow014AndWithoutOn081(t *testing.T) {
	t.Parallel()
	dir014 := pgtest.Pgflow014(t)
	oracle, echo, echoMap := module(t, "modules/testdata/oracle.wasm"), module(t, "modules/testdata/echo.wasm"), module(t, "modules/testdata/echo_map.wasm")
	base := fmt.Sprintf(conditionFlows, oracle, echo, echoMap)
	withIf := strings.Replace(base, fmt.Sprintf(`      - {slug: premium, depends_on: [start], module: %q}`, oracle), fmt.Sprintf(premiumCondition, oracle), 1)
	for _, c := range []struct {
		name, migrations, flows string
		skipped                 bool
	}{
		{"pgflow 0.14.1 with the condition", dir014, withIf, true},
		{"pgflow main of 2026-10-01 with the condition", pgtest.PgflowMain(t), withIf, true},
		{"pgflow 0.8.1, the same file without it", filepath.Join(repoRoot(t), schema.DefaultMigrationsDir), base, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewCluster(t).NewDB(t, pgtest.Empty()) // a fresh, plain PostgreSQL
			env := []string{"DATABASE_URL=" + db.URL}
			if out, errOut, code := runBinary(t, env, "db", "install", "--migrations", c.migrations); code != 0 {
				t.Fatalf("db install: exit %d\n%s%s", code, out, errOut)
			}
			flows := writeFile(t, "flows.yaml", c.flows)
			startServe(t, db.URL, flows, "--signal", "notify")
			db.WaitServing(t, "plans")
			out, errOut, code := runBinary(t, env, "start", "plans", "--input", `{"plan": "free", "value": [1, 2, 3]}`, "--wait", "--timeout", "1m")
			if code != 0 {
				t.Fatalf("start --wait: exit %d, %s %s", code, out, errOut)
			}
			var tasks int
			if err := db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.step_tasks where step_slug = 'premium'`).Scan(&tasks); err != nil {
				t.Fatal(err)
			}
			var report struct {
				Input map[string]json.RawMessage `json:"input"`
			}
			var start struct {
				Input map[string]json.RawMessage `json:"input"`
			}
			for step, dst := range map[string]any{"report": &report, "start": &start} {
				var output []byte
				if err := db.Pool.QueryRow(context.Background(), `select output::text from pgflow.step_tasks where step_slug = $1`, step).Scan(&output); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(output, dst); err != nil {
					t.Fatal(err)
				}
			}
			_, sawPremium := report.Input["premium"]
			switch {
			case string(start.Input["run"]) != `{"plan": "free", "value": [1, 2, 3]}` && string(start.Input["run"]) != `{"plan":"free","value":[1,2,3]}`:
				t.Errorf("the root handler's input lacks run: %v", start.Input)
			case c.skipped && (tasks != 0 || sawPremium):
				t.Errorf("premium (if plan is pro) ran %d tasks; report saw its key: %v", tasks, sawPremium)
			case !c.skipped && (tasks != 1 || !sawPremium):
				t.Errorf("without the condition premium ran %d tasks; report saw its key: %v", tasks, sawPremium)
			case string(report.Input["doubled"]) != "[1, 2, 3]":
				t.Errorf("report got doubled = %s, want the map's output [1, 2, 3]", report.Input["doubled"])
			}
			if r, err := db.Audit(context.Background()); err != nil || r.OracleTasks < 2 || len(r.Problems()) > 0 {
				t.Errorf("audit: %d oracle outputs, %v, %v", r.OracleTasks, r.Problems(), err)
			}
		})
	}
}

// db status names the pgflow of any database: one it installed, at any release, and one
// installed by another tool.
func TestDBStatusNamesThePgflowRelease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		files            int
		release, version string
	}{
		{12, "0.8.1", "0.8"},
		{16, "0.12.0", "0.12"},
		{20, "0.14.1", "0.14"},
		{21, "0.15.0", "0.15.0"},
		{22, "0.15.1", "0.15.1"},
		{23, "0.16.0", "0.16"},
		{24, "0.17.0", "0.17"},
		{27, "main (2026-10-01)", "main of 2026-10-01 (after 0.17.0)"},
	} {
		t.Run(c.release, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t, pgtest.Empty())
			env := []string{"DATABASE_URL=" + db.URL}
			dir := ""
			if c.files <= 20 {
				dir = pgtest.PgflowRelease(t, c.files)
			} else {
				dir = pgtest.PgflowMainRelease(t, c.files)
			}
			if out, errOut, code := runBinary(t, env, "db", "install", "--migrations", dir); code != 0 {
				t.Fatalf("db install: exit %d\n%s%s", code, out, errOut)
			}
			out, errOut, code := runBinary(t, env, "db", "status", "--migrations", dir)
			for _, want := range []string{
				fmt.Sprintf("pgflow:        %s (%d migrations applied by pgflow-wasm, 0 pending)", c.release, c.files),
				"protocol:      " + c.version + ", detected from the catalogue (pgflow-wasm speaks it)",
			} {
				if code != 0 || !strings.Contains(out, want) {
					t.Errorf("db status: exit %d, lacks %q:\n%s%s", code, want, out, errOut)
				}
			}
			// The same pgflow as another tool leaves it: no record of ours.
			if _, err := db.Pool.Exec(context.Background(), `drop schema pgflow_wasm cascade`); err != nil {
				t.Fatal(err)
			}
			out, _, _ = runBinary(t, env, "db", "status")
			if !strings.Contains(out, "pgflow:        installed by another tool") || !strings.Contains(out, "protocol:      "+c.version+",") {
				t.Errorf("db status of a pgflow another tool installed:\n%s", out)
			}
		})
	}
}
