package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
)

func workerCommand() *cli.Command {
	return &cli.Command{
		Name:            "worker",
		Usage:           "drain or undrain a pgflow-wasm worker process (every flow it serves at once)",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{
			processCommand("drain", pgflowwasm.DrainWorkerProcess,
				"stop a worker process taking new tasks of every flow it serves; its running tasks finish and it stays up",
				"The process reads the flag within its --heartbeat-interval (5s by default) and keeps\n"+
					"it across reloads; `worker undrain` undoes it. ID is the process id the dashboard's\n"+
					"workers page shows, or the id of any of its pgflow.workers rows. The action is recorded\n"+
					"in pgflow_wasm.operator_actions with --actor.\n\n"+
					"Example:\n   pgflow-wasm worker drain 7c9e6679-7425-40de-944b-e07fc1f90ae7"),
			processCommand("undrain", pgflowwasm.UndrainWorkerProcess,
				"let a drained worker process take tasks again",
				"The process takes tasks again within its --heartbeat-interval. Recorded in\n"+
					"pgflow_wasm.operator_actions with --actor.\n\n"+
					"Example:\n   pgflow-wasm worker undrain 7c9e6679-7425-40de-944b-e07fc1f90ae7"),
		},
	}
}

type processAction func(ctx context.Context, pool *pgxpool.Pool, id, actor string) (pgflowwasm.WorkerProcessChange, error)

func processCommand(name string, act processAction, usage, description string) *cli.Command {
	return &cli.Command{
		Name:        name,
		Usage:       usage,
		ArgsUsage:   "ID",
		Description: description,
		Flags:       []cli.Flag{dbFlag(), actorFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("usage: pgflow-wasm worker "+name+" ID (a worker process id, or a worker id of one)", 2)
			}
			pool, err := openPgflow(c.Context, c, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := act(c.Context, pool, c.Args().First(), actor(c))
			if errors.Is(err, pgflowwasm.ErrNoWorkerProcess) {
				return cli.Exit(err.Error(), 1)
			}
			if err != nil {
				return err
			}
			state := map[string]string{"drain": "drained", "undrain": "undrained"}[name]
			if !res.Changed {
				fmt.Fprintf(c.App.Writer, "worker process %s on %s was already %s\n", res.ProcessID, res.Host, state)
				return nil
			}
			fmt.Fprintf(c.App.Writer, "%s worker process %s on %s\n", state, res.ProcessID, res.Host)
			return nil
		},
	}
}
