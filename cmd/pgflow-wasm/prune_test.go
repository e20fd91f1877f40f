package main

import (
	"context"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// db prune: a dry run counts and deletes nothing, a prune deletes the old finished run and
// keeps the running one, and bad ages and batch sizes are refused with exit code 2.
func TestDBPruneCountsThenDeletesOnlyOldFinishedRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	for _, sql := range []string{
		`select pgflow.create_flow('prune_cli')`,
		`select pgflow.add_step('prune_cli', 'a')`,
		`select pgflow.start_flow('prune_cli', '{}'::jsonb) from generate_series(1, 2)`,
		// One run finished 40 days ago (as pgflow's own complete would leave it); the other runs.
		`update pgflow.runs set status = 'completed', started_at = now() - interval '41 days', completed_at = now() - interval '40 days', remaining_steps = 0
		 where run_id = (select run_id from pgflow.runs order by run_id limit 1)`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	runs := func() (n int) {
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	out, err := runCLI(t, "db", "prune", "--database-url", db.URL, "--older-than", "30d", "--dry-run")
	if err != nil || !strings.Contains(out, "would delete") || !strings.Contains(out, "runs               1\n") || runs() != 2 {
		t.Fatalf("dry run: %v, %d runs left\n%s", err, runs(), out)
	}
	out, err = runCLI(t, "db", "prune", "--database-url", db.URL, "--older-than", "30d")
	if err != nil || !strings.Contains(out, "runs               1\n") || !strings.Contains(out, "step states        1\n") || runs() != 1 {
		t.Fatalf("prune: %v, %d runs left\n%s", err, runs(), out)
	}
	for args, want := range map[string]string{
		"--older-than 30":                 `--older-than: "30" is not an age`,
		"--older-than 0d":                 "more than zero",
		"--older-than 30d --batch-size 0": "--batch-size 0: give at least 1",
	} {
		out, err := runCLI(t, append([]string{"db", "prune", "--database-url", db.URL}, strings.Fields(args)...)...)
		var exit cli.ExitCoder
		if err == nil || !strings.Contains(err.Error(), want) || !asExit(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("db prune %s: %v (%s), want exit 2 saying %q", args, err, out, want)
		}
	}
}

func asExit(err error, out *cli.ExitCoder) bool {
	e, ok := err.(cli.ExitCoder)
	*out = e
	return ok
}

// serve refuses a bad --prune-older-than before it touches the database.
func TestServeRefusesABadPruneAge(t *testing.T) {
	out, err := runCLI(t, "serve", "--database-url", "postgres://nowhere.invalid/db", "--prune-older-than", "3x")
	var exit cli.ExitCoder
	if err == nil || !strings.Contains(err.Error(), `--prune-older-than: "3x" is not an age`) || !asExit(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("serve --prune-older-than 3x: %v (%s), want exit 2 naming the flag", err, out)
	}
}
