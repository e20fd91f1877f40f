package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/replay"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func replayCommand() *cli.Command {
	return withConfigFile(&cli.Command{
		Name:      "replay",
		Usage:     "run a task of the database again on this machine, writing nothing back",
		ArgsUsage: "RUN_ID STEP [INDEX]",
		Description: "Rebuilds the task's input and context from pgflow's tables as the worker built them, and\n" +
			"runs the step's module (or the one --module gives, say a fixed build) in the same sandbox,\n" +
			"with the step's limits and capabilities from --flows. Prints the output, or the error (exit\n" +
			"1), after what the database recorded of the task's last attempt. INDEX is a map element's\n" +
			"index (default 0).\n\n" +
			"Nothing is written: no pgflow function is called, and a step's `sql` statements run in one\n" +
			"transaction that is rolled back at the end. HTTP calls go out as in the worker unless\n" +
			"--no-http. --print-input prints the input and context instead (for `exec`).\n\n" +
			"Examples:\n" +
			"   pgflow-wasm replay 7c9e6679-7425-40de-944b-e07fc1f90ae7 charge\n" +
			"   pgflow-wasm replay 7c9e6679-7425-40de-944b-e07fc1f90ae7 resize 17 --module target/resize.wasm",
		Flags: append([]cli.Flag{
			dbFlag(), flowsFlag(),
			&cli.StringFlag{Name: "module", Usage: "run this module instead of the step's (.wasm, .ts or .js; for a step of a flow file, a flow file that defines the step)"},
			&cli.DurationFlag{Name: "timeout", Usage: "the step timeout", DefaultText: "the step's, as pgflow stores it"},
			&cli.BoolFlag{Name: "no-http", Usage: "take the step's HTTP capability away"},
			&cli.BoolFlag{Name: "print-input", Usage: "print the task's input and context as JSON and run nothing"},
			&cli.StringFlag{Name: "engine", Value: sandbox.EngineWazero, Usage: "wazero or wasmtime"},
			&cli.StringFlag{Name: "cache-dir", Value: sandbox.DefaultCacheDir(), Usage: "compilation cache folder (\"\" disables it)"},
		}, logFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 || c.NArg() > 3 {
				return cli.Exit("usage: pgflow-wasm replay RUN_ID STEP [INDEX]", 2)
			}
			id, err := store.ParseRunID(c.Args().Get(0))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			index := 0
			if c.NArg() == 3 {
				if index, err = strconv.Atoi(c.Args().Get(2)); err != nil || index < 0 {
					return cli.Exit(fmt.Sprintf("INDEX %q is not a task index (0, 1, 2 …)", c.Args().Get(2)), 2)
				}
			}
			pool, err := openPgflow(c.Context, c, 4)
			if err != nil {
				return err
			}
			defer pool.Close()
			if c.Bool("print-input") {
				return printTask(c, pool, id, c.Args().Get(1), index)
			}
			file, err := flowfile.Load(c.String("flows"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			engine, err := sandbox.New(c.String("engine"), sandbox.Config{CacheDir: c.String("cache-dir")})
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			defer engine.Close(c.Context)
			log, err := newLogger(c, c.App.ErrWriter)
			if err != nil {
				return err
			}
			res, err := replay.Run(c.Context, replay.Config{Pool: pool, Flows: file, Engine: engine, RunID: id,
				Step: c.Args().Get(1), Index: index, Module: c.String("module"), Timeout: c.Duration("timeout"),
				NoHTTP: c.Bool("no-http"), Log: log})
			if errors.Is(err, store.ErrNotFound) {
				return cli.Exit(err.Error(), 1)
			}
			if err != nil {
				return err
			}
			return reportReplay(c, res)
		},
	})
}

// reportReplay prints what the database recorded, the handler's log lines, then its output
// (stdout) or error (exit 1).
func reportReplay(c *cli.Context, res *replay.Result) error {
	t := res.Task
	w := c.App.ErrWriter
	fmt.Fprintf(w, "task %s[%d] of run %s (flow %s): %s after %d attempt(s)", t.Step.Slug, t.Index, t.RunID, t.FlowSlug, t.Status, t.Attempts)
	if t.Error != "" {
		fmt.Fprintf(w, ", last error:\n  %s", t.Error)
	}
	fmt.Fprintf(w, "\nreplaying with %s (timeout %s), writing nothing back\n", res.Module, res.Timeout)
	if c.Bool("no-http") {
		fmt.Fprintln(w, "(--no-http: the step's HTTP capability is taken away, its requests fail)")
	}
	for _, l := range res.Run.Logs {
		fmt.Fprintf(w, "[%s] %s\n", levelName(l.Level), l.Message)
	}
	if res.Err != nil {
		msg := fmt.Sprintf("handler failed after %s: %s", res.Run.Duration.Round(time.Microsecond), res.Err)
		switch {
		case res.Reproduced():
			msg += "\n(the failure reproduces)"
		case t.Error != "":
			msg += "\n(it fails differently from the task's last attempt)"
		}
		return cli.Exit(msg, 1)
	}
	fmt.Fprintln(c.App.Writer, string(res.Run.Output))
	fmt.Fprintf(w, "(handler took %s, %d fuel)\n", res.Run.Duration.Round(time.Microsecond), res.Run.FuelUsed)
	return nil
}

// printTask prints a task's input and context, as `exec --input` and `--context` take them.
func printTask(c *cli.Context, pool *pgxpool.Pool, id, step string, index int) error {
	t, err := replay.Prepare(c.Context, pool, id, step, index, c.Duration("timeout"))
	if errors.Is(err, store.ErrNotFound) {
		return cli.Exit(err.Error(), 1)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "{\"input\": %s,\n \"context\": %s}\n", t.Record.Input, t.Context)
	return nil
}
