package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/runctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
)

// actorFlag is who an operator action is recorded as.
func actorFlag() cli.Flag {
	return &cli.StringFlag{Name: "actor", Usage: "who asks, for the audit (default: user@host of this process)"}
}

func actor(c *cli.Context) string {
	if a := c.String("actor"); a != "" {
		return a
	}
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel a running run: its handlers stop, nothing of it stays queued or started",
		ArgsUsage: "RUN_ID",
		Description: "Fails the run in one transaction, as pgflow does when a run fails: its queued and started\n" +
			"tasks become cancelled (failed, before pgflow 0.15.1), its messages are archived, and\n" +
			"pgflow-wasm workers stop the handlers still running within a second. The action is\n" +
			"recorded in pgflow_wasm.operator_actions with --actor.\n\n" +
			"Example:\n   pgflow-wasm cancel 7c9e6679-7425-40de-944b-e07fc1f90ae7 --reason 'wrong input'",
		Flags: []cli.Flag{dbFlag(), actorFlag(),
			&cli.StringFlag{Name: "reason", Usage: "why, stored on the run's tasks and in the audit"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("usage: pgflow-wasm cancel RUN_ID", 2)
			}
			id, err := store.ParseRunID(c.Args().First())
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			pool, err := openPgflow(c.Context, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := runctl.Cancel(c.Context, pool, id, actor(c), c.String("reason"))
			if errors.Is(err, runctl.ErrNotRunning) {
				return cli.Exit(err.Error()+": nothing to cancel", 1)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "cancelled run %s of flow %s: %d tasks cancelled\n", res.RunID, res.Flow, res.Tasks)
			return nil
		},
	}
}

func rerunCommand() *cli.Command {
	return &cli.Command{
		Name:      "rerun",
		Usage:     "start a new run of a run's flow with the same input, recorded as its rerun",
		ArgsUsage: "RUN_ID",
		Description: "Prints the new run's id. pgflow_wasm.reruns records which run it repeats, `run` shows the\n" +
			"link, and pgflow_wasm.operator_actions records who asked (--actor).\n\n" +
			"Example:\n   pgflow-wasm rerun 7c9e6679-7425-40de-944b-e07fc1f90ae7",
		Flags: []cli.Flag{dbFlag(), actorFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("usage: pgflow-wasm rerun RUN_ID", 2)
			}
			id, err := store.ParseRunID(c.Args().First())
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			pool, err := openPgflow(c.Context, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			newID, err := runctl.Rerun(c.Context, pool, id, actor(c))
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, newID)
			return nil
		},
	}
}
