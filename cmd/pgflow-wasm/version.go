package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo"
)

// version is this build's version: make's `git describe`, or "devel-<commit>" (with
// "+dirty" for uncommitted changes) from a plain go build.
func version() string { return buildinfo.Get().Version }

func init() {
	// --version tells the commit, the engines and the pgflow SQL too, and what a plain
	// `go build` left out.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprint(c.App.Writer, buildinfo.Get().String()) }
}
