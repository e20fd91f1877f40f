package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
)

func flowCommand() *cli.Command {
	return &cli.Command{
		Name:            "flow",
		Usage:           "manage flows in the database",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name:      "drop",
			Usage:     "remove a flow with all its runs and its queue, so its slug can be used again",
			ArgsUsage: "SLUG",
			Description: "pgflow flows are immutable: while you write one, every change of its steps needs a new\n" +
				"slug. `flow drop` deletes the flow, every run, step state and task of it, and its pgmq\n" +
				"queue, so `compile` (or a running `serve`, which reloads flows.yaml) can create it anew.\n" +
				"It is for development: run history is lost. It refuses while runs are in progress unless\n" +
				"--force, and asks first on a terminal unless --yes.\n\n" +
				"Example:\n   pgflow-wasm flow drop word_totals",
			Flags: []cli.Flag{dbFlag(),
				&cli.BoolFlag{Name: "force", Usage: "drop it even while runs are in progress (their tasks are lost)"},
				&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation"}},
			Action: flowDrop,
		}, flowListCommand()},
	}
}

func flowDrop(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("usage: pgflow-wasm flow drop SLUG", 2)
	}
	slug := c.Args().First()
	pool, err := openPgflow(c.Context, c, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	runs, running, found, err := compile.Counts(c.Context, pool, slug)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if !found {
		return cli.Exit(fmt.Sprintf("no flow %q in this database (`pgflow-wasm runs` lists the flows that have runs)", slug), 1)
	}
	if running > 0 && !c.Bool("force") {
		return cli.Exit((&compile.RunningError{Slug: slug, Running: running}).Error(), 1)
	}
	if !c.Bool("yes") && isTerminal(os.Stdin) {
		fmt.Fprintf(c.App.Writer, "drop flow %s with its %d runs (%d in progress) and its queue? [y/N] ", slug, runs, running)
		answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return cli.Exit("not dropped", 1)
		}
	}
	rep, err := compile.Drop(c.Context, pool, slug, c.Bool("force"))
	var busy *compile.RunningError
	switch {
	case errors.As(err, &busy):
		return cli.Exit(err.Error(), 1)
	case err != nil:
		return cli.Exit(fmt.Sprintf("dropping flow %s: %v", slug, err), 1)
	}
	fmt.Fprintf(c.App.Writer, "dropped flow %s: %d runs deleted, its queue dropped; its slug is free\n", rep.Slug, rep.Runs)
	return nil
}

func flowListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the flows of flows.yaml with their schedules: next tick, and the last tick a run was started for",
		Flags: []cli.Flag{flowsFlag(), dbFlag()},
		Action: func(c *cli.Context) error {
			file, err := flowfile.Load(c.String("flows"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			pool, err := openPgflow(c.Context, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FLOW\tSTEPS\tSCHEDULE\tNEXT TICK\tLAST TICK\tLAST RUN")
			for _, fl := range file.Flows {
				steps := fmt.Sprint(len(fl.Steps))
				if fl.Split() {
					steps = fmt.Sprintf("%d (%d served elsewhere)", len(fl.Steps), len(fl.Steps)-len(fl.Served()))
				}
				sched, next, last, lastRun := "-", "-", "-", "-"
				st, ok, err := schedule.Describe(c.Context, pool, fl, time.Now())
				if err != nil {
					return err
				}
				if ok {
					sched, next = st.When(), st.Next.Format(time.RFC3339)
					if st.Last != nil {
						last, lastRun = st.Last.Format(time.RFC3339), st.LastRunID
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", fl.Slug, steps, sched, next, last, lastRun)
			}
			return tw.Flush()
		},
	}
}
