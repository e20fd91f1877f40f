package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

func dbPruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "delete finished runs older than an age, with everything kept about them",
		Description: "Deletes runs that completed or failed longer ago than --older-than, with their step states\n" +
			"and tasks, their tasks' archived queue messages and pgflow-wasm's rows about them (attempt\n" +
			"history, audit, rerun links, schedule ticks). Runs still going are never touched. The work\n" +
			"goes --batch-size runs per transaction, so workers serving meanwhile are not held up.\n" +
			"`serve --prune-older-than` does the same every hour (docs/operations.md \"Retention\").\n\n" +
			"Example:\n   pgflow-wasm db prune --older-than 30d --dry-run",
		Flags: []cli.Flag{databaseURLFlag(),
			&cli.StringFlag{Name: "older-than", Required: true, Usage: "the `AGE` of the runs to delete: 30d, 12h, 90m, 1d12h"},
			&cli.BoolFlag{Name: "dry-run", Usage: "count what would be deleted, delete nothing"},
			&cli.IntFlag{Name: "batch-size", Value: 1000, Usage: "runs deleted per transaction"}},
		Action: dbPrune,
	}
}

func dbPrune(c *cli.Context) error {
	age, err := pgflowwasm.ParseAge(c.String("older-than"))
	if err != nil {
		return cli.Exit("--older-than: "+err.Error(), 2)
	}
	if c.Int("batch-size") < 1 {
		return cli.Exit(fmt.Sprintf("--batch-size %d: give at least 1", c.Int("batch-size")), 2)
	}
	pool, err := openPgflow(c.Context, c, 3)
	if err != nil {
		return err
	}
	defer pool.Close()
	w := c.App.Writer
	if c.Bool("dry-run") {
		n, err := pgflowwasm.PruneCount(c.Context, pool, age)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		fmt.Fprintf(w, "would delete (runs finished more than %s ago; nothing was deleted):\n", c.String("older-than"))
		printPruned(w, n)
		return nil
	}
	start := time.Now()
	n, err := pgflowwasm.Prune(c.Context, pool, pgflowtype.PruneOptions{OlderThan: age, BatchSize: c.Int("batch-size")})
	if errors.Is(err, pgflowwasm.ErrPruneBusy) {
		return cli.Exit(err.Error()+": nothing was deleted; try again once it is done", 1)
	}
	if err != nil {
		printPruned(w, n)
		return cli.Exit(fmt.Sprintf("prune stopped after %d batches (what they deleted stays deleted): %v", n.Batches, err), 1)
	}
	fmt.Fprintf(w, "deleted (runs finished more than %s ago) in %d batches, %.1f s:\n", c.String("older-than"), n.Batches, time.Since(start).Seconds())
	printPruned(w, n)
	return nil
}

func printPruned(w io.Writer, n pgflowtype.Pruned) {
	fmt.Fprintf(w, "  runs               %d\n", n.Runs)
	fmt.Fprintf(w, "  step states        %d\n", n.StepStates)
	fmt.Fprintf(w, "  step tasks         %d\n", n.StepTasks)
	fmt.Fprintf(w, "  archived messages  %d\n", n.ArchivedMessages)
	for _, t := range n.OwnTables() {
		fmt.Fprintf(w, "  %-18s %d\n", t, n.Own[t])
	}
}
