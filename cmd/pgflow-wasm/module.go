package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/handlertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

func moduleCommand() *cli.Command {
	return &cli.Command{
		Name:            "module",
		Usage:           "work with handler modules",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name:      "inspect",
			Usage:     "show a module's ABI version, mode, imports, exports and memory, and whether the sandbox accepts it",
			ArgsUsage: "FILE (.wasm, or a TypeScript or JavaScript handler: .ts, .mts, .js, .mjs)",
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
		}, {
			Name:      "test",
			Usage:     "run a handler's unit tests through the sandbox: each case one task, as the worker runs it",
			ArgsUsage: "HANDLER [CASES]",
			Description: "HANDLER is a .ts, .js or .wasm handler; CASES a JSON file (default: HANDLER's name with\n" +
				".test.json) of cases, each a task and what it must give:\n\n" +
				"  {\"pgflow_version\": \"0.14\", \"cases\": [\n" +
				"    {\"name\": \"greets\", \"flow_input\": {\"name\": \"Ada\"}, \"output\": {\"greeting\": \"Hello, Ada!\"}},\n" +
				"    {\"name\": \"after a step\", \"deps\": {\"price\": 12}, \"env\": {\"TOKEN\": \"x\"}, \"error\": \"no customer\"},\n" +
				"    {\"name\": \"one element of a map\", \"element\": \"a line\", \"task_index\": 3, \"output\": 2, \"logs\": [\"counted\"]}]}\n\n" +
				"env grants named values with these values, http_allow outbound HTTP to these hosts (real\n" +
				"requests). pgflow_version picks the handler input pgflow's own worker gives (0.8: {\"run\": ...}\n" +
				"for every step; 0.12 and later: the flow input for a step without deps). Exits 1 when a case fails.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "engine", Value: sandbox.EngineWazero, Usage: "wazero or wasmtime (binaries built with -tags wasmtime)"},
				&cli.StringFlag{Name: "cache-dir", Value: sandbox.DefaultCacheDir(), Usage: "compilation cache folder (\"\" disables it)"},
			},
			Action: moduleTest,
		}},
	}
}

func moduleTest(c *cli.Context) error {
	if c.NArg() < 1 || c.NArg() > 2 {
		return cli.Exit("module test: give a handler and, optionally, its cases file", 2)
	}
	handler := c.Args().Get(0)
	cases := c.Args().Get(1)
	if cases == "" {
		cases = handlertest.DefaultCases(handler)
	}
	f, err := handlertest.Read(cases)
	if err != nil {
		return cli.Exit("module test: "+err.Error(), 2)
	}
	engine, err := sandbox.New(c.String("engine"), sandbox.Config{CacheDir: c.String("cache-dir")})
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	defer engine.Close(c.Context)
	results, err := handlertest.Run(c.Context, engine, handler, f)
	if err != nil {
		return cli.Exit("module test: "+err.Error(), 2)
	}
	passed := 0
	for _, r := range results {
		if r.Passed {
			passed++
			fmt.Fprintf(c.App.Writer, "ok    %s (%s)\n", r.Name, r.Duration.Round(10*time.Microsecond))
		} else {
			fmt.Fprintf(c.App.Writer, "FAIL  %s: %s\n", r.Name, r.Problem)
		}
	}
	fmt.Fprintf(c.App.Writer, "%s: %d of %d cases passed (%s)\n", handler, passed, len(results), engine.Name())
	if passed != len(results) {
		return cli.Exit("", 1)
	}
	return nil
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
	// Sources: the files a TypeScript or JavaScript handler imports besides itself.
	Sources []string `json:"sources,omitempty"`
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

	var info sandbox.Info
	var sources []string
	if jshandler.IsSource(path) {
		// A TypeScript or JavaScript handler is a module once bundled and snapshotted, as the
		// worker does it; what it is made of then shows.
		if _, err := os.Stat(path); err != nil {
			return cli.Exit("module inspect: cannot read "+path+": "+err.Error(), 2)
		}
		info.Path = path
		m, err := step.LoadPath(c.Context, engine, path, "", mc)
		if err == nil {
			info = m.Info()
			sources = step.Sources(m)
			_ = m.Close(c.Context)
		}
		return reportInspection(c, engine, info, sources, limit, err)
	}
	// The static checks first, so a rejected module still shows what it is made of;
	// then a real Load, which compiles it and asks for its ABI version.
	info, err = sandbox.Inspect(path, cfg, mc)
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
	return reportInspection(c, engine, info, nil, limit, err)
}

// reportInspection prints what inspect found; exit code 1 when the module is rejected.
func reportInspection(c *cli.Context, engine sandbox.Engine, info sandbox.Info, sources []string, limit uint64, err error) error {
	var rejected *sandbox.Error
	if err != nil && !errors.As(err, &rejected) {
		return cli.Exit(err.Error(), 2)
	}
	out := inspection{Path: c.Args().First(), Size: info.Size, SHA256: info.SHA256, Mode: info.Mode, ABIVersion: info.ABIVersion,
		MemoryMin: info.MemoryMinPages, MemoryMax: info.MemoryMaxPages, Imports: info.Imports, Exports: info.Exports,
		Engine: engine.Name(), MemoryLimit: limit, Accepted: err == nil, Sources: sources}
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
	for _, src := range in.Sources {
		fmt.Fprintf(tw, "imports source:\t%s\n", src)
	}
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
