package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

func moduleCommand() *cli.Command {
	return &cli.Command{
		Name:            "module",
		Usage:           "work with handler modules",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name:      "inspect",
			Usage:     "show a module's ABI version, mode, imports, exports and memory, and whether the sandbox accepts it",
			ArgsUsage: "FILE",
			Description: "Validates the module as the worker would when loading a flow: allowed imports and their\n" +
				"signatures, required exports, memory (against --memory-limit), then compiles it and asks it\n" +
				"for its ABI version. Exits 1 when the module is rejected, 2 when it cannot be read or on bad usage.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "engine", Value: sandbox.EngineWazero, Usage: "wazero or wasmtime (binaries built with -tags wasmtime)"},
				&cli.StringFlag{Name: "memory-limit", Value: bytesize.Flag(sandbox.DefaultMemoryLimit), Usage: "the step's memory limit, e.g. 32MiB, 512KiB, 1GiB or bytes"},
				&cli.StringFlag{Name: "cache-dir", Value: sandbox.DefaultCacheDir(), Usage: "compilation cache folder (\"\" disables it)"},
				&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of text"},
			},
			Action: moduleInspect,
		}},
	}
}

// inspection is the JSON form of `module inspect`.
type inspection struct {
	Path        string         `json:"path"`
	Size        int64          `json:"size"`
	SHA256      string         `json:"sha256"`
	Mode        string         `json:"mode"`
	ABIVersion  int32          `json:"abi_version"`
	MemoryMin   uint32         `json:"memory_min_pages"`
	MemoryMax   uint32         `json:"memory_max_pages"`
	Imports     []sandbox.Func `json:"imports"`
	Exports     []sandbox.Func `json:"exports"`
	Engine      string         `json:"engine"`
	MemoryLimit uint64         `json:"memory_limit"`
	Accepted    bool           `json:"accepted"`
	Reason      string         `json:"reason,omitempty"`
}

func moduleInspect(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("module inspect: give exactly one module file", 2)
	}
	limit, ok := bytesize.Parse(c.String("memory-limit"))
	if !ok || limit == 0 {
		return cli.Exit(fmt.Sprintf("--memory-limit: %q is not a size: write e.g. 64MiB, 512KiB, 1GiB or a number of bytes", c.String("memory-limit")), 2)
	}
	path := c.Args().First()
	cfg := sandbox.Config{CacheDir: c.String("cache-dir")}
	mc := sandbox.ModuleConfig{MemoryLimit: limit}
	engine, err := sandbox.New(c.String("engine"), cfg)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	defer engine.Close(c.Context)

	// The static checks first, so a rejected module still shows what it is made of;
	// then a real Load, which compiles it and asks for its ABI version.
	info, err := sandbox.Inspect(path, cfg, mc)
	if err != nil && info.SHA256 == "" {
		// The file could not be read: there is no module to describe, only the reason.
		msg := err.Error()
		if se := (*sandbox.Error)(nil); errors.As(err, &se) {
			msg = se.Message
		}
		return cli.Exit("module inspect: "+msg, 2)
	}
	if err == nil {
		var m sandbox.Module
		if m, err = engine.Load(c.Context, path, mc); err == nil {
			info = m.Info()
			_ = m.Close(c.Context)
		}
	}
	var rejected *sandbox.Error
	if err != nil && !errors.As(err, &rejected) {
		return cli.Exit(err.Error(), 2)
	}
	out := inspection{Path: path, Size: info.Size, SHA256: info.SHA256, Mode: info.Mode, ABIVersion: info.ABIVersion,
		MemoryMin: info.MemoryMinPages, MemoryMax: info.MemoryMaxPages, Imports: info.Imports, Exports: info.Exports,
		Engine: engine.Name(), MemoryLimit: limit, Accepted: err == nil}
	if rejected != nil {
		out.Reason = rejected.Message
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		printInspection(c.App.Writer, out)
	}
	if !out.Accepted {
		return cli.Exit("", 1)
	}
	return nil
}

func printInspection(w io.Writer, in inspection) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file:\t%s\n", in.Path)
	fmt.Fprintf(tw, "size:\t%d bytes\n", in.Size)
	fmt.Fprintf(tw, "sha256:\t%s\n", in.SHA256)
	fmt.Fprintf(tw, "mode:\t%s\n", orDash(in.Mode))
	abi := "-"
	if in.ABIVersion != 0 {
		abi = strconv.Itoa(int(in.ABIVersion))
	}
	fmt.Fprintf(tw, "abi version:\t%s\n", abi)
	max := "no maximum"
	if in.MemoryMax != 0 {
		max = fmt.Sprintf("max %d pages", in.MemoryMax)
	}
	fmt.Fprintf(tw, "memory:\tmin %d pages (%d KiB), %s; limit %s\n", in.MemoryMin, uint64(in.MemoryMin)*64, max, bytesize.Flag(in.MemoryLimit))
	fmt.Fprintf(tw, "engine:\t%s\n", in.Engine)
	tw.Flush()
	printFuncs(w, "imports", in.Imports, true)
	printFuncs(w, "exports", in.Exports, false)
	if in.Accepted {
		fmt.Fprintln(w, "accepted: yes")
	} else {
		fmt.Fprintf(w, "accepted: no (%s)\n", in.Reason)
	}
}

func printFuncs(w io.Writer, title string, fs []sandbox.Func, qualified bool) {
	fmt.Fprintf(w, "%s (%d):\n", title, len(fs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range fs {
		name := f.Name
		if qualified {
			name = f.Module + "." + f.Name
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, f.Signature)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
