// Command pgflow-wasm is a pgflow worker that runs step handlers compiled to WebAssembly.
//
// This package is wiring only: flags, environment variables and output formatting.
// The work happens in host, poller, sandbox and schema.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := newApp()
	if err := app.Run(flagsFirst(app, os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "pgflow-wasm:", err)
		os.Exit(exitCode(err))
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "pgflow-wasm",
		Usage: "run pgflow workflow steps as sandboxed WebAssembly modules on any PostgreSQL",
		Description: "pgflow-wasm is a worker for pgflow, the Postgres-native DAG workflow engine.\n" +
			"Declare flows in flows.yaml, point each step at a handler (.wasm, .ts or .js), then:\n\n" +
			"   pgflow-wasm new rust hello # a project for your own handler (rust, tinygo, go, assemblyscript, c, typescript)\n" +
			"   pgflow-wasm db install     # pgmq + pgflow schema on your database\n" +
			"   pgflow-wasm validate       # check flows.yaml and every module\n" +
			"   pgflow-wasm serve          # compile the flows and run their tasks\n" +
			"   pgflow-wasm start FLOW --input '{...}' --wait\n\n" +
			"The database comes from --database-url or DATABASE_URL. `pgflow-wasm COMMAND --help`\n" +
			"explains each command and flag.",
		Version:         version(),
		HideHelpCommand: true,
		Commands:        commands(),
	}
}

// commands lists every subcommand; each lives in its own file of this package.
func commands() []*cli.Command {
	return []*cli.Command{
		serveCommand(),
		validateCommand(),
		compileCommand(),
		startCommand(),
		runsCommand(),
		runCommand(),
		cancelCommand(), rerunCommand(), workerCommand(),
		execCommand(),
		replayCommand(),
		uiCommand(),
		dbCommand(), localdbCommand(),
		moduleCommand(),
		newCommand(),
		flowCommand(),
	}
}

// exitCode maps an error to the process exit code: cli.ExitCoder errors choose their own.
func exitCode(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return 1
}
