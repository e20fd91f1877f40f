package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
)

// bookTS books an amount in the ledger through ctx.sql; the broken build refuses amounts
// over 100 after its insert (which the failed task's transaction rolls back).
const bookTS = `
export default async function book(_input: unknown, ctx: any) {
  const inserted = await ctx.sql` + "`insert into app.ledger (run_id, task_index, amount) values (${ctx.stepTask.run_id}, 0, ${ctx.flowInput.amount})`" + `;
  %s
  return { inserted: inserted.count, amount: ctx.flowInput.amount };
}
`

// replay reruns a failed task on this machine: its error reproduces; a fixed module given
// with --module succeeds; nothing it does reaches the database (its SQL is rolled back,
// no pgflow function is called).
func TestReplayReproducesAFailureAndAFixedModuleSucceeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	role := db.Ledger(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("book.ts", fmt.Sprintf(bookTS, `if (ctx.flowInput.amount > 100) throw new Error("book: amount " + ctx.flowInput.amount + " is over the limit of 100");`))
	fixed := write("fixed.ts", fmt.Sprintf(bookTS, ""))
	flows := write("flows.yaml", fmt.Sprintf(`
flows:
  - slug: booking
    max_attempts: 1
    sql: {role: %s}
    steps:
      - {slug: book, module: book.ts}
`, role))
	startServe(t, db.URL, flows)
	db.WaitServing(t, "booking")
	env := []string{"DATABASE_URL=" + db.URL}
	out, errOut, code := runBinary(t, env, "start", "booking", "--input", `{"amount": 500}`)
	if code != 0 {
		t.Fatalf("start: exit %d %s %s", code, out, errOut)
	}
	run := strings.TrimSpace(out)
	if r := workertest.WaitRun(t, db.Pool, run, time.Minute); r.Status != "failed" {
		t.Fatalf("run %s, want failed", r.Status)
	}
	ledgerRows := func() int {
		var n int
		if err := db.Pool.QueryRow(ctx, `select count(*) from app.ledger`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var before string
	if err := db.Pool.QueryRow(ctx, `select (select row_to_json(t)::text from pgflow.step_tasks t where run_id = $1::uuid)`, run).Scan(&before); err != nil {
		t.Fatal(err)
	}

	out, errOut, code = runBinary(t, env, "replay", "--flows", flows, run, "book")
	if code != 1 || out != "" || strings.Count(errOut, "amount 500 is over the limit of 100") != 2 || !strings.Contains(errOut, "(the failure reproduces)") {
		t.Errorf("replay with the broken module: exit %d, want 1 with the recorded and the new error:\n%s%s", code, out, errOut)
	}
	out, errOut, code = runBinary(t, env, "replay", "--flows", flows, run, "book", "--module", fixed)
	if code != 0 || strings.TrimSpace(out) != `{"inserted":1,"amount":500}` {
		t.Errorf("replay with the fixed module: exit %d, want its output:\n%s%s", code, out, errOut)
	}
	var after string
	if err := db.Pool.QueryRow(ctx, `select (select row_to_json(t)::text from pgflow.step_tasks t where run_id = $1::uuid)`, run).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if n := ledgerRows(); n != 0 || after != before {
		t.Errorf("after the replays: %d ledger rows (want 0: the replay's SQL rolls back); task row changed: %v", n, after != before)
	}

	out, errOut, code = runBinary(t, env, "replay", run, "book", "--print-input")
	var printed struct{ Input, Context map[string]any }
	if code != 0 || json.Unmarshal([]byte(out), &printed) != nil || !strings.Contains(fmt.Sprint(printed.Input), "amount:500") ||
		printed.Context["run_id"] != run || printed.Context["attempt"] != 1.0 {
		t.Errorf("--print-input: exit %d\n%s%s", code, out, errOut)
	}
	for args, want := range map[string]string{
		"nosuch":    `has no step "nosuch": its steps are book`,
		"book 3":    "has tasks 0 to 0, not 3",
		"book last": `INDEX "last" is not a task index`,
	} {
		_, errOut, code := runBinary(t, env, append([]string{"replay", "--flows", flows, run}, strings.Fields(args)...)...)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("replay %s: exit %d %q, want %q", args, code, errOut, want)
		}
	}
}
