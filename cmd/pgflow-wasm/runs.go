package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/pgflow-wasm/pgflow-wasm/internal/runctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
)

func startCommand() *cli.Command {
	return withConfigFile(&cli.Command{
		Name:      "start",
		Usage:     "start a run of a flow (needs only the database, not flows.yaml)",
		ArgsUsage: "FLOW",
		Description: "Prints the run id. With --wait it follows the run's events until it ends, prints the\n" +
			"run output and exits 0 when it completed, 1 (with the error) when it failed. When no live\n" +
			"worker serves the flow (no pgflow.workers row for its queue with a heartbeat in the last\n" +
			pgflowwasm.WorkerStaleAfterDefault.String() + ", stopped or deprecated), it says so at once: the run waits in the queue\n" +
			"until a worker starts.\n\n" +
			"Examples:\n" +
			"   pgflow-wasm start hello --input '{\"name\": \"Ada\"}' --wait\n" +
			"   pgflow-wasm start word_totals --input @words.json --wait --timeout 1m",
		Flags: []cli.Flag{dbFlag(),
			altsrc.NewStringFlag(&cli.StringFlag{Name: "input", Value: "{}", EnvVars: env("input"),
				Usage: "the flow input: JSON text, @FILE, or - for stdin"}),
			altsrc.NewBoolFlag(&cli.BoolFlag{Name: "wait", EnvVars: env("wait"), Usage: "wait for the run to end and print its output"}),
			durationFlag("timeout", 0, "with --wait: give up after this long (0 = wait forever)"),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("start needs exactly one FLOW argument, e.g. `pgflow-wasm start hello --input '{\"name\":\"Ada\"}'`", 2)
			}
			flow := c.Args().First()
			input, err := readInput(c.String("input"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			if !json.Valid(input) {
				return cli.Exit(fmt.Sprintf("--input is not valid JSON: %.80s", input), 2)
			}
			ctx := c.Context
			if d := c.Duration("timeout"); d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			pool, err := openPgflow(ctx, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := store.Open(ctx, pool)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			// Said at once: otherwise --wait would wait without a word for a worker that never comes.
			if workers, err := st.FlowWorkers(ctx, flow); err == nil {
				if warning := workers.NoWorkerWarning(flow); warning != "" {
					fmt.Fprintln(c.App.ErrWriter, "warning:", warning)
				}
			}
			if !c.Bool("wait") {
				id, err := store.Start(ctx, pool, flow, input)
				if err != nil {
					return cli.Exit(err.Error(), 1)
				}
				fmt.Println(id)
				return nil
			}
			r, err := st.StartAndWait(ctx, flow, input, 10*time.Second)
			if err != nil {
				if ctx.Err() != nil {
					return cli.Exit(fmt.Sprintf("gave up waiting after %s (the run goes on: `pgflow-wasm runs --flow %s`)", c.Duration("timeout"), flow), 1)
				}
				return cli.Exit(err.Error(), 1)
			}
			if r.Status != "completed" {
				fmt.Fprintf(os.Stderr, "run %s failed after %s: %s\n", r.ID, r.Duration().Round(time.Millisecond), r.Error)
				return cli.Exit("", 1)
			}
			fmt.Fprintf(os.Stderr, "run %s completed in %s\n", r.ID, r.Duration().Round(time.Millisecond))
			fmt.Println(string(r.Output))
			return nil
		},
	})
}

func runsCommand() *cli.Command {
	return withConfigFile(&cli.Command{
		Name:  "runs",
		Usage: "list recent runs, newest first",
		Flags: []cli.Flag{dbFlag(),
			&cli.StringFlag{Name: "flow", Usage: "only runs of this flow"},
			&cli.StringFlag{Name: "status", Usage: "only runs in this state: started, completed or failed"},
			&cli.IntFlag{Name: "limit", Value: 20, Usage: "at most this many runs (up to 500)"},
		},
		Action: func(c *cli.Context) error {
			pool, err := openPgflow(c.Context, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := store.Open(c.Context, pool)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			page, err := st.List(c.Context, store.RunFilter{Flow: c.String("flow"), Status: c.String("status"), Limit: c.Int("limit")})
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN ID\tFLOW\tSTATUS\tSTARTED\tDURATION\tFAILED STEP: ERROR")
			for _, r := range page.Runs {
				// One line per run, whatever the error holds: `run RUN_ID` shows it whole.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Flow, r.Status,
					r.StartedAt.Local().Format("2006-01-02 15:04:05"), r.Duration().Round(time.Millisecond), r.ErrorLine(70))
			}
			return tw.Flush()
		},
	})
}

func runCommand() *cli.Command {
	return withConfigFile(&cli.Command{
		Name:      "run",
		Usage:     "show one run as a tree of steps and tasks: states, attempts, errors, durations",
		ArgsUsage: "RUN_ID",
		Flags: []cli.Flag{dbFlag(),
			&cli.BoolFlag{Name: "all", Usage: "list every task and whole errors and outputs (by default at most 10 tasks per step, 6 lines each)"},
			&cli.BoolFlag{Name: "outputs", Usage: "show each task's output"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("run needs exactly one RUN_ID argument (see `pgflow-wasm runs`)", 2)
			}
			pool, err := openPgflow(c.Context, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := store.Open(c.Context, pool)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			tree, err := st.GetTreeWith(c.Context, c.Args().First(), store.TreeOptions{Outputs: c.Bool("outputs")})
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			limit := 10
			if c.Bool("all") {
				limit = 0
			}
			tree.RenderWith(c.App.Writer, store.RenderOptions{MaxTasks: limit, Outputs: c.Bool("outputs")})
			links, err := runctl.RerunLinks(c.Context, pool, tree.Run.ID)
			if err != nil {
				return err
			}
			if links.RerunOf != "" {
				fmt.Fprintf(c.App.Writer, "rerun of %s\n", links.RerunOf)
			}
			if len(links.Reruns) > 0 {
				fmt.Fprintf(c.App.Writer, "reruns: %s\n", strings.Join(links.Reruns, ", "))
			}
			return nil
		},
	})
}
