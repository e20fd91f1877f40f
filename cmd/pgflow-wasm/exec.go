package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a handler module once on an input, without a database",
		ArgsUsage: "HANDLER (.wasm, or a TypeScript or JavaScript handler: .ts, .mts, .js, .mjs)",
		Description: "Runs the module in the same sandbox `serve` uses (fresh instance, deny-all WASI, the\n" +
			"timeout and memory limit given) and prints its output; its log lines go to stderr. The\n" +
			"context is a made-up task's (run id of zeros, attempt 1) unless --context gives one. Exits 1\n" +
			"when the handler fails, with its error. A way to try a handler, or to debug one with the\n" +
			"input of a failed task (`replay` fetches that from the database). A @pgflow/dsl flow file\n" +
			"runs the inline handler of the step --step names (and --flow, when the file exports several\n" +
			"flows), or of the step --context names.\n\n" +
			"Examples:\n   pgflow-wasm exec modules/examples/c/greet.wasm --input '{\"run\": {\"name\": \"Ada\"}}'\n" +
			"   pgflow-wasm exec modules/examples/typescript/greet.ts --input '{\"run\": {\"name\": \"Ada\"}}'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "input", Value: "{}", Usage: "the handler's input, JSON (@FILE reads a file)"},
			&cli.StringFlag{Name: "context", Usage: "the task context, JSON (@FILE reads a file); default: a made-up task's"},
			&cli.DurationFlag{Name: "timeout", Value: 60 * time.Second, Usage: "the step timeout"},
			&cli.StringFlag{Name: "memory-limit", Value: bytesize.Flag(sandbox.DefaultMemoryLimit), Usage: "linear-memory cap, e.g. 64MiB"},
			&cli.Int64Flag{Name: "fuel", Usage: "work units the task may use (0: unlimited)"},
			&cli.StringFlag{Name: "engine", Value: sandbox.EngineWazero, Usage: "wazero or wasmtime"},
			&cli.StringFlag{Name: "cache-dir", Value: sandbox.DefaultCacheDir(), Usage: "compilation cache folder (\"\" disables it)"},
			&cli.StringFlag{Name: "flow", Usage: "of a flow file: the flow whose step runs (default: the file's only flow)"},
			&cli.StringFlag{Name: "step", Usage: "of a flow file: the step whose inline handler runs"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("usage: pgflow-wasm exec HANDLER --input JSON (HANDLER: a .wasm module or a .ts/.js file)", 2)
			}
			input, err := jsonArg(c.String("input"), "--input")
			if err != nil {
				return err
			}
			path := c.Args().First()
			var flows []jshandler.FlowShape
			if jshandler.IsSource(path) {
				flows, _ = jshandler.DescribeFlowFile(c.Context, path, "", jshandler.Options{CacheDir: c.String("cache-dir")})
			}
			flow, stepSlug, err := execStep(flows, c.String("flow"), c.String("step"), c.IsSet("context"))
			if err != nil {
				return cli.Exit("exec: "+err.Error(), 2)
			}
			ctxJSON := []byte(nil)
			if s := c.String("context"); s != "" {
				if ctxJSON, err = jsonArg(s, "--context"); err != nil {
					return err
				}
			} else {
				ctxJSON = madeUpContext(c.Duration("timeout"), input, flow, stepSlug)
			}
			limit, ok := bytesize.Parse(c.String("memory-limit"))
			if !ok || limit == 0 {
				return cli.Exit(fmt.Sprintf("--memory-limit: %q is not a size", c.String("memory-limit")), 2)
			}
			engine, err := sandbox.New(c.String("engine"), sandbox.Config{CacheDir: c.String("cache-dir")})
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			defer engine.Close(c.Context)
			// A .ts or .js handler is bundled and snapshotted as the worker does it.
			m, err := step.LoadAs(c.Context, engine, &flowfile.Step{FlowFile: len(flows) > 0}, path, sandbox.ModuleConfig{MemoryLimit: limit, Fuel: c.Int64("fuel")})
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			defer m.Close(c.Context)
			return runOnce(c, m, input, ctxJSON, c.Duration("timeout"))
		},
	}
}

// execStep is the flow and step of a made-up task: "exec" for a handler file; of a flow file
// (flows), the step --step names, in --flow or the file's only flow. With --context, the
// context names them.
func execStep(flows []jshandler.FlowShape, flow, stepSlug string, hasContext bool) (string, string, error) {
	if len(flows) == 0 {
		if flow != "" || stepSlug != "" {
			return "", "", errors.New("--flow and --step name a step of a @pgflow/dsl flow file; this file exports no Flow")
		}
		return "exec", "exec", nil
	}
	if hasContext {
		return "", "", nil
	}
	var slugs []string
	for _, fl := range flows {
		slugs = append(slugs, fl.Slug)
	}
	if flow == "" {
		if len(flows) > 1 {
			return "", "", fmt.Errorf("the file exports %d flows (%s): say which with --flow", len(flows), strings.Join(slugs, ", "))
		}
		flow = flows[0].Slug
	}
	for _, fl := range flows {
		if fl.Slug != flow {
			continue
		}
		var steps []string
		for _, s := range fl.Steps {
			if s.Slug == stepSlug {
				return flow, stepSlug, nil
			}
			steps = append(steps, s.Slug)
		}
		return "", "", fmt.Errorf("name the step of flow %q to run with --step: %s", flow, strings.Join(steps, ", "))
	}
	return "", "", fmt.Errorf("the file exports no flow %q: its flows are %s", flow, strings.Join(slugs, ", "))
}

// runOnce runs a task on a loaded module and prints what happened: its output (stdout) or
// its error (exit 1), its log lines on stderr.
func runOnce(c *cli.Context, m sandbox.Module, input, ctxJSON []byte, timeout time.Duration) error {
	res, err := m.Run(c.Context, sandbox.Task{Input: input, Context: ctxJSON, Timeout: timeout})
	for _, l := range res.Logs {
		fmt.Fprintf(c.App.ErrWriter, "[%s] %s\n", levelName(l.Level), l.Message)
	}
	if err != nil {
		var se *sandbox.Error
		if errors.As(err, &se) {
			return cli.Exit(fmt.Sprintf("handler failed after %s: %s", res.Duration.Round(time.Microsecond), se.Error()), 1)
		}
		return err
	}
	fmt.Fprintln(c.App.Writer, string(res.Output))
	fmt.Fprintf(c.App.ErrWriter, "(handler took %s, %d fuel)\n", res.Duration.Round(time.Microsecond), res.FuelUsed)
	return nil
}

// jsonArg reads a JSON argument: the text, or @FILE.
func jsonArg(s, flag string) ([]byte, error) {
	b := []byte(s)
	if len(s) > 1 && s[0] == '@' {
		var err error
		if b, err = os.ReadFile(s[1:]); err != nil {
			return nil, cli.Exit(fmt.Sprintf("%s: %v", flag, err), 2)
		}
	}
	if !json.Valid(b) {
		return nil, cli.Exit(flag+" is not valid JSON", 2)
	}
	return b, nil
}

// madeUpContext is the context of a task that exists nowhere (ABI v1's keys). Its flow input
// is the input's "run", as a step's input carries it (a TypeScript handler's ctx.flowInput).
func madeUpContext(timeout time.Duration, input []byte, flow, stepSlug string) []byte {
	run := "00000000-0000-0000-0000-000000000000"
	var in struct {
		Run json.RawMessage `json:"run"`
	}
	var flowInput any
	if json.Unmarshal(input, &in) == nil && in.Run != nil {
		flowInput = in.Run
	}
	b, _ := json.Marshal(map[string]any{
		abi.CtxRunID: run, abi.CtxFlowSlug: flow, abi.CtxStepSlug: stepSlug, abi.CtxTaskIndex: 0, abi.CtxAttempt: 1,
		abi.CtxMsgID: 0, abi.CtxFlowInput: flowInput, abi.CtxWorkerID: run, abi.CtxTimeoutMS: timeout.Milliseconds(),
		abi.CtxIdempotencyKey: abi.IdempotencyKey(run, stepSlug, 0),
	})
	return b
}

func levelName(l int32) string {
	switch l {
	case abi.LogDebug:
		return "debug"
	case abi.LogWarn:
		return "warn"
	case abi.LogError:
		return "error"
	}
	return "info"
}
