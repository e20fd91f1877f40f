package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
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
			ArgsUsage: "FILE (.wasm, or a TypeScript or JavaScript handler or @pgflow/dsl flow file: .ts, .mts, .js, .mjs)",
			Description: "Validates the module as the worker would when loading a flow: allowed imports and their\n" +
				"signatures, required exports, memory (against --memory-limit), then compiles it and asks it\n" +
				"for its ABI version. A flow file (one that exports a Flow of @pgflow/dsl) shows its flows and\n" +
				"their steps as serve reads them, and the one module every step's inline handler runs from.\n" +
				"Exits 1 when the module is rejected, 2 when it cannot be read or on bad usage.",
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
				"for every step; 0.12 and later: the flow input for a step without deps). HANDLER may be a\n" +
				"@pgflow/dsl flow file: each case then names the step whose inline handler it runs, \"step\"\n" +
				"(and \"flow\" when the file exports several), with that step's deps or element.\n" +
				"Exits 1 when a case fails.",
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
	// Sources: the files a TypeScript or JavaScript handler imports besides itself; of a flow
	// file, the files its one bundle imports, which every step's inline handler runs from.
	Sources []string `json:"sources,omitempty"`
	// Flows: the Flows of @pgflow/dsl a flow file exports, as the worker serves them from it.
	Flows []inspectedFlow `json:"flows,omitempty"`
}

// inspectedFlow is one Flow of a flow file: its options as pgflow stores them and its steps.
type inspectedFlow struct {
	Slug        string          `json:"slug"`
	Exports     []string        `json:"exports"`
	MaxAttempts int             `json:"max_attempts"`
	BaseDelay   int             `json:"base_delay"`
	Timeout     int             `json:"timeout"`
	Steps       []inspectedStep `json:"steps"`
}

// inspectedStep is one step of a flow file's Flow; options the file leaves out are omitted
// (the flow's apply).
type inspectedStep struct {
	Slug        string   `json:"slug"`
	Type        string   `json:"type"`
	DependsOn   []string `json:"depends_on"`
	MaxAttempts *int     `json:"max_attempts,omitempty"`
	BaseDelay   *int     `json:"base_delay,omitempty"`
	Timeout     *int     `json:"timeout,omitempty"`
	StartDelay  *int     `json:"start_delay,omitempty"`
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
		if shapes, err := jshandler.DescribeFlowFile(c.Context, path, "", jshandler.Options{CacheDir: cfg.CacheDir}); err == nil && len(shapes) > 0 {
			return inspectFlowFile(c, engine, path, shapes, limit)
		}
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

// inspectFlowFile inspects a @pgflow/dsl flow file as serve --flows FILE serves it: its Flows
// read as the worker reads them (refusals with their file:line), and the module every step's
// inline handler runs from, loaded as the worker loads it.
func inspectFlowFile(c *cli.Context, engine sandbox.Engine, path string, shapes []jshandler.FlowShape, limit uint64) error {
	info := sandbox.Info{Path: path}
	var flows []inspectedFlow
	var sources []string
	file, err := flowfile.Load(path)
	if err != nil {
		// The file's refusals, each with its file:line, are the reason it is not accepted.
		err = &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: err.Error()}
	} else {
		for _, fl := range file.Flows {
			in := inspectedFlow{Slug: fl.Slug, MaxAttempts: fl.MaxAttempts, BaseDelay: fl.BaseDelay, Timeout: fl.Timeout}
			for _, sh := range shapes {
				if sh.Slug == fl.Slug {
					in.Exports = sh.Exports
				}
			}
			for _, s := range fl.Steps {
				in.Steps = append(in.Steps, inspectedStep{Slug: s.Slug, Type: s.Type, DependsOn: append([]string{}, s.DependsOn...),
					MaxAttempts: s.MaxAttempts, BaseDelay: s.BaseDelay, Timeout: s.Timeout, StartDelay: s.StartDelay})
			}
			flows = append(flows, in)
		}
		// Every step runs from one snapshot of the file: loading one step loads them all.
		for _, fl := range file.Flows {
			if len(fl.Steps) == 0 {
				continue
			}
			s := *fl.Steps[0]
			s.MemoryLimit = limit
			var m sandbox.Module
			if m, err = step.Load(c.Context, engine, file, fl, &s, nil, nil); err == nil {
				info = m.Info()
				sources = step.Sources(m)
				_ = m.Close(c.Context)
			}
			break
		}
	}
	return reportInspection(c, engine, info, sources, limit, err, flows...)
}

// reportInspection prints what inspect found; exit code 1 when the module is rejected.
func reportInspection(c *cli.Context, engine sandbox.Engine, info sandbox.Info, sources []string, limit uint64, err error, flows ...inspectedFlow) error {
	var rejected *sandbox.Error
	if err != nil && !errors.As(err, &rejected) {
		return cli.Exit(err.Error(), 2)
	}
	out := inspection{Path: c.Args().First(), Size: info.Size, SHA256: info.SHA256, Mode: info.Mode, ABIVersion: info.ABIVersion,
		MemoryMin: info.MemoryMinPages, MemoryMax: info.MemoryMaxPages, Imports: info.Imports, Exports: info.Exports,
		Engine: engine.Name(), MemoryLimit: limit, Accepted: err == nil, Sources: sources, Flows: flows}
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
	printFlows(w, in.Flows)
	printFuncs(w, "imports", in.Imports, true)
	printFuncs(w, "exports", in.Exports, false)
	if in.Accepted {
		fmt.Fprintln(w, "accepted: yes")
	} else {
		fmt.Fprintf(w, "accepted: no (%s)\n", in.Reason)
	}
}

// printFlows lists a flow file's Flows and their steps, with the options the file sets.
func printFlows(w io.Writer, flows []inspectedFlow) {
	if len(flows) == 0 {
		return
	}
	fmt.Fprintf(w, "flows (%d; every step's inline handler runs from the module below, its imports the sources above):\n", len(flows))
	for _, fl := range flows {
		fmt.Fprintf(w, "  %s (export %s): max attempts %d, base delay %d s, timeout %d s\n",
			fl.Slug, strings.Join(fl.Exports, ", "), fl.MaxAttempts, fl.BaseDelay, fl.Timeout)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, s := range fl.Steps {
			deps := "-"
			if len(s.DependsOn) > 0 {
				deps = strings.Join(s.DependsOn, ", ")
			}
			var opts []string
			for _, o := range []struct {
				name string
				v    *int
			}{{"maxAttempts", s.MaxAttempts}, {"baseDelay", s.BaseDelay}, {"timeout", s.Timeout}, {"startDelay", s.StartDelay}} {
				if o.v != nil {
					opts = append(opts, fmt.Sprintf("%s %d", o.name, *o.v))
				}
			}
			if len(opts) == 0 {
				opts = []string{"-"}
			}
			fmt.Fprintf(tw, "    %s\t%s\tdepends on %s\toptions %s\n", s.Slug, s.Type, deps, strings.Join(opts, ", "))
		}
		tw.Flush()
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
