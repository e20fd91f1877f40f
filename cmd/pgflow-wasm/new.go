package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/handlertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/scaffold"
)

func newCommand() *cli.Command {
	return &cli.Command{
		Name:      "new",
		Usage:     "make a project for your own handler: " + strings.Join(scaffold.Names(), ", "),
		ArgsUsage: "LANG FOLDER",
		Description: "Writes a ready project into FOLDER (created; anywhere, e.g. next to your other code):\n" +
			"a handler skeleton with unit tests that call it through the ABI, a Makefile whose `make`\n" +
			"installs the missing toolchain and builds NAME.wasm on a fresh Debian machine, a flows.yaml\n" +
			"that runs it, and the guest library copied from this binary (pgflow/, versioned in\n" +
			"pgflow/VERSION: no registry needed). NAME is the folder's name unless --name gives another;\n" +
			"it names the flow, its step and the module file. A typescript project has a flow written with\n" +
			"pgflow's DSL (flow.ts; `make` installs @pgflow/dsl with npm) whose step runs NAME.ts, which\n" +
			"the worker bundles itself, tests run by `pgflow-wasm module test`, and ctx's types.\n\n" +
			"Examples:\n" +
			"   pgflow-wasm new rust ~/code/resize_image\n" +
			"   pgflow-wasm new tinygo ./handlers/score --name score_order\n" +
			"   cd ~/code/resize_image && make && make test && pgflow-wasm validate",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "the handler's name (flow and step slug, module file), if not the folder's name"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return cli.Exit("new needs LANG and FOLDER, e.g. `pgflow-wasm new rust ~/code/hello` (LANG: "+strings.Join(scaffold.Names(), ", ")+")", 2)
			}
			p, err := scaffold.New(scaffold.Options{Lang: c.Args().Get(0), Dir: c.Args().Get(1), Name: c.String("name"), Version: version()})
			if err != nil {
				return cli.Exit("new: "+err.Error(), 2)
			}
			printProject(c, p)
			return nil
		},
	}
}

// printProject tells what was written and what to do next.
func printProject(c *cli.Context, p *scaffold.Project) {
	w := c.App.Writer
	dir := p.Dir
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, p.Dir); err == nil && !strings.HasPrefix(rel, "..") {
			dir = rel
		}
	}
	fmt.Fprintf(w, "created %s: %s %s handler named %s (%d files)\n", dir, article(p.Lang.Title), p.Lang.Title, p.Name, len(p.Files))
	if p.TestFile() == p.HandlerFile() {
		fmt.Fprintf(w, "  %-22s the handler and its unit tests (%s)\n", p.HandlerFile(), p.Lang.TestRunner)
	} else {
		fmt.Fprintf(w, "  %-22s the handler\n", p.HandlerFile())
		fmt.Fprintf(w, "  %-22s its unit tests (%s)\n", p.TestFile(), p.Lang.TestRunner)
	}
	if p.Lang.FlowFile() {
		fmt.Fprintf(w, "  %-22s the flow %q (@pgflow/dsl) with one step that runs the handler\n", p.Module, p.Name)
		fmt.Fprintf(w, "  %-22s its tests (pgflow-wasm module test: each case a task of the step it names)\n", handlertest.DefaultCases(p.Module))
		fmt.Fprintf(w, "  %-22s serves %s; grants its steps HTTP hosts, env and SQL\n", "flows.yaml", p.Module)
	} else {
		fmt.Fprintf(w, "  %-22s a flow %q with one step that runs %s\n", "flows.yaml", p.Name, p.Module)
	}
	fmt.Fprintf(w, "  %-22s %s\n", "pgflow/", p.Library)
	fmt.Fprintf(w, "\nnext:\n")
	fmt.Fprintf(w, "  cd %s\n", dir)
	fmt.Fprintf(w, "  make                    # %s\n", p.Lang.MakeDoes(p.Name))
	fmt.Fprintf(w, "  make test               # unit tests: %s\n", p.Lang.TestRunner)
	fmt.Fprintf(w, "  pgflow-wasm validate\n")
	fmt.Fprintf(w, "  pgflow-wasm serve       # with DATABASE_URL set; `pgflow-wasm db install` installs pgflow there\n")
	fmt.Fprintf(w, "  pgflow-wasm start %s --input '{\"name\": \"Ada\"}' --wait\n", p.Name)
	if p.Lang.FlowFile() {
		fmt.Fprintf(w, "\nTo serve it from another flows.yaml, add this entry to its flows (the path is relative to that file):\n")
		fmt.Fprintf(w, "  - flow: %s\n", filepath.Join(p.Dir, p.Module))
		return
	}
	fmt.Fprintf(w, "\nTo run it from another flows.yaml, add this step to a flow there (the path is relative to that file):\n")
	fmt.Fprintf(w, "      - slug: %s\n        module: %s\n", p.Name, filepath.Join(p.Dir, p.Module))
}

// article is "an" before a vowel sound ("an AssemblyScript handler"), else "a".
func article(word string) string {
	if word != "" && strings.ContainsRune("AEIOUaeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}
