package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
)

func localdbCommand() *cli.Command {
	return &cli.Command{
		Name:  "localdb",
		Usage: "run this checkout's local PostgreSQL (data in <repo>/.pgdata, port chosen per checkout)",
		Description: "The cluster the tests and `make run` use. It runs as the postgres system user when\n" +
			"started by root, listens on 127.0.0.1 only, trusts local connections, and has fsync off\n" +
			"(disposable data). `localdb up` prints the URL of its database pgflow.",
		Subcommands: []*cli.Command{
			{Name: "up", Usage: "initialize and start the cluster (idempotent), print the database URL", Action: localdbUp},
			{Name: "down", Usage: "stop the cluster (data is kept)", Action: localdbDown},
			{Name: "url", Usage: "print the database URL (for DATABASE_URL=$(pgflow-wasm localdb url))", Action: localdbURL},
			{Name: "status", Usage: "report folder, port and state; exit 1 when stopped", Action: localdbStatus},
		},
	}
}

// devCluster is the cluster of the checkout around the working directory.
func devCluster() (*localpg.Cluster, error) {
	root, err := localpg.RepoRoot(".")
	if err != nil {
		return nil, cli.Exit(err.Error()+": run localdb from the repository", 2)
	}
	c, err := localpg.Dev(root, nil)
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	return c, nil
}

func localdbUp(c *cli.Context) error {
	cl, err := devCluster()
	if err != nil {
		return err
	}
	if cl.Relocated != "" {
		fmt.Fprintln(c.App.ErrWriter, "localdb:", cl.Relocated)
	}
	if err := cl.Start(c.Context); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if err := cl.EnsureDatabase(c.Context, localpg.DevDatabase); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintln(c.App.Writer, cl.URL(localpg.DevDatabase))
	return nil
}

func localdbDown(c *cli.Context) error {
	cl, err := devCluster()
	if err != nil {
		return err
	}
	if err := cl.Stop(c.Context); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintf(c.App.Writer, "stopped (data kept in %s)\n", cl.DataDir())
	return nil
}

func localdbURL(c *cli.Context) error {
	cl, err := devCluster()
	if err != nil {
		return err
	}
	info := cl.Info(c.Context)
	if !info.Initialized {
		return cli.Exit("no local cluster yet: run `pgflow-wasm localdb up`", 1)
	}
	fmt.Fprintln(c.App.Writer, cl.URL(localpg.DevDatabase))
	return nil
}

func localdbStatus(c *cli.Context) error {
	cl, err := devCluster()
	if err != nil {
		return err
	}
	in := cl.Info(c.Context)
	w := c.App.Writer
	state := "stopped"
	if in.Running {
		state = "running"
	}
	if !in.Initialized {
		state = "not initialized (run `pgflow-wasm localdb up`)"
	}
	fmt.Fprintf(w, "state:      %s\n", state)
	fmt.Fprintf(w, "server:     PostgreSQL %d, runs as %s\n", in.Major, in.RunsAs)
	fmt.Fprintf(w, "folder:     %s\n", in.Dir)
	if in.Relocated != "" {
		fmt.Fprintf(w, "            (%s)\n", in.Relocated)
	}
	fmt.Fprintf(w, "url:        %s\n", cl.URL(localpg.DevDatabase))
	if in.Fsync != "" {
		fmt.Fprintf(w, "fsync:      %s\n", in.Fsync)
	}
	fmt.Fprintf(w, "log:        %s\n", in.LogFile)
	fmt.Fprintf(w, "extensions: %s\n", in.ExtensionDir)
	if !in.Running {
		return cli.Exit("", 1)
	}
	return nil
}
