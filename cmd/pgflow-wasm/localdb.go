package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
)

func localdbCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "dir", Usage: "the cluster's folder `DIR` (default: <repo>/.pgdata inside a checkout, else\n" +
			"\t~/.local/share/pgflow-wasm/pgdata, one cluster per user)"},
		&cli.StringFlag{Name: "extensions", Usage: "copy the extension files (*.control, *.sql) of `DIR` into the cluster's private\n" +
			"\textension folder, e.g. a real pgmq's, so its CREATE EXTENSION works there"},
	}
	upFlags := append(flags, &cli.IntFlag{Name: "port", DefaultText: "the port it used last, else one derived from DIR",
		Usage: "listen on 127.0.0.1:`PORT` (1-65535), kept for the next up; fails if another\n" +
			"\tprocess holds it or the cluster runs on another port (without --port: the next free port)"})
	return &cli.Command{
		Name:            "localdb",
		HideHelpCommand: true,
		Usage:           "run a local PostgreSQL for development (a checkout's <repo>/.pgdata, else one per user)",
		Description: "The cluster the tests and `make run` use. It runs as the postgres system user when\n" +
			"started by root, listens on 127.0.0.1 only, trusts local connections, and has fsync off\n" +
			"(disposable data). Its server reads a private copy of the installation, so nothing is\n" +
			"written into the machine's PostgreSQL folders. `localdb up` prints the URL of its database,\n" +
			"named pgflow. `localdb down` stops it; the data stays for the next `localdb up`.\n\n" +
			"Example, a second cluster offering the real pgmq, on port 5433:\n" +
			"   pgflow-wasm localdb up --dir /tmp/pg-real --extensions ../shared/pgmq/1.5.1 --port 5433",
		Subcommands: []*cli.Command{
			{Name: "up", Usage: "initialize and start the cluster (idempotent), print the database URL", Flags: upFlags, Action: localdbUp},
			{Name: "down", Usage: "stop the cluster (data is kept)", Flags: flags[:1], Action: localdbDown},
			{Name: "url", Usage: "print the database URL (for DATABASE_URL=$(pgflow-wasm localdb url))", Flags: append(flags[:1:1],
				&cli.StringFlag{Name: "user", Usage: "log in as `ROLE` instead of the superuser postgres, e.g. the worker login of\n" +
					"\t`db grant-worker` (the cluster trusts local connections: no password)"}), Action: localdbURL},
			{Name: "status", Usage: "report folder, port and state; exit 1 when stopped", Flags: flags[:1], Action: localdbStatus},
		},
	}
}

// devCluster is the cluster of --dir, else of the checkout around the working directory.
func devCluster(c *cli.Context) (*localpg.Cluster, error) {
	files, err := localpg.ExtensionFiles(c.String("extensions"))
	if err != nil {
		return nil, cli.Exit("--extensions: "+err.Error(), 2)
	}
	dir := c.String("dir")
	if dir == "" {
		if root, err := localpg.RepoRoot("."); err == nil {
			dir = filepath.Join(root, localpg.DevDirName)
		} else if dir, err = userClusterDir(); err != nil {
			return nil, cli.Exit(err.Error()+": give the cluster's folder with --dir", 2)
		}
	}
	port := 0
	if c.IsSet("port") {
		if port = c.Int("port"); port < 1 || port > 65535 {
			return nil, cli.Exit(fmt.Sprintf("--port %d: give a TCP port from 1 to 65535", port), 2)
		}
	}
	cl, err := localpg.New(localpg.Config{Dir: dir, ExtensionFiles: files, Port: port, FixedPort: port != 0})
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	return cl, nil
}

// userClusterDir is the per-user cluster outside any checkout:
// $XDG_DATA_HOME/pgflow-wasm/pgdata, else ~/.local/share/pgflow-wasm/pgdata.
func userClusterDir() (string, error) {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home folder for the per-user cluster: %w", err)
		}
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "pgflow-wasm", "pgdata"), nil
}

func localdbUp(c *cli.Context) error {
	cl, err := devCluster(c)
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
	cl, err := devCluster(c)
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
	cl, err := devCluster(c)
	if err != nil {
		return err
	}
	info := cl.Info(c.Context)
	if !info.Initialized {
		return cli.Exit("no local cluster yet: run `pgflow-wasm localdb up`", 1)
	}
	u := cl.URL(localpg.DevDatabase)
	if user := c.String("user"); user != "" {
		parsed, err := url.Parse(u)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		parsed.User = url.User(user)
		u = parsed.String()
	}
	fmt.Fprintln(c.App.Writer, u)
	return nil
}

func localdbStatus(c *cli.Context) error {
	cl, err := devCluster(c)
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
