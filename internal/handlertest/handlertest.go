// Package handlertest runs a handler's unit tests through the real sandbox: `pgflow-wasm
// module test HANDLER [CASES]`. Each case is one task, run as the worker runs it (the same
// loading, input, context, limits and capabilities), with its expected output or error. It is
// how a TypeScript project of `pgflow-wasm new` tests its handler, and works for any module.
package handlertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// File is a cases file (JSON).
type File struct {
	// PgflowVersion is the pgflow whose handler input the cases see: "0.8" gives
	// {"run": <flow input>, ...} to every step, "0.12" and later the flow input to a step
	// without dependencies [the newest this worker speaks].
	PgflowVersion string `json:"pgflow_version"`
	// Timeout of each case, in seconds [5].
	Timeout     float64 `json:"timeout"`
	MemoryLimit uint64  `json:"memory_limit"`
	Cases       []Case  `json:"cases"`
}

// Case is one task and what it must give.
type Case struct {
	Name string `json:"name"`
	// Flow and Step name the step of a @pgflow/dsl flow file whose inline handler the case
	// runs (Flow may be left out when the file exports one Flow); a handler file takes neither.
	Flow      string          `json:"flow"`
	Step      string          `json:"step"`
	FlowInput json.RawMessage `json:"flow_input"`
	// Deps are the outputs of the step's dependencies, by slug (none: a root step).
	Deps map[string]json.RawMessage `json:"deps"`
	// Element makes the step a map step and this the task's element.
	Element   json.RawMessage `json:"element"`
	TaskIndex int             `json:"task_index"`
	Attempt   int             `json:"attempt"`
	// Env grants these named values (the step's `env`, with values for the test).
	Env map[string]string `json:"env"`
	// HTTPAllow grants outbound HTTP to these hosts (the step's http.allow): real requests.
	HTTPAllow []string `json:"http_allow"`
	// Output is the output the task must give (compared as JSON values), or Error a text
	// its error must contain; Logs, lines its log must contain.
	Output json.RawMessage `json:"output"`
	Error  string          `json:"error"`
	Logs   []string        `json:"logs"`
	// PgflowVersion overrides the file's for this case.
	PgflowVersion string `json:"pgflow_version"`
}

// Result of one case.
type Result struct {
	Name     string
	Passed   bool
	Problem  string // why it failed
	Duration time.Duration
}

// DefaultCases is the cases file of a handler: its path without the extension, plus .test.json.
func DefaultCases(handler string) string {
	return strings.TrimSuffix(handler, filepath.Ext(handler)) + ".test.json"
}

// Read reads a cases file.
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := &File{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Cases) == 0 {
		return nil, fmt.Errorf("%s has no cases", path)
	}
	for i, c := range f.Cases {
		if c.Name == "" {
			return nil, fmt.Errorf("%s: case %d has no name", path, i+1)
		}
		if (c.Output == nil) == (c.Error == "") {
			return nil, fmt.Errorf("%s: case %q must give either output or error", path, c.Name)
		}
	}
	return f, nil
}

// Run runs every case of f against the handler at path on eng. A @pgflow/dsl flow file
// (one that exports a Flow) runs each case on the inline handler of the step it names.
func Run(ctx context.Context, eng sandbox.Engine, path string, f *File) ([]Result, error) {
	var flows []jshandler.FlowShape
	if jshandler.IsSource(path) {
		if shapes, err := jshandler.DescribeFlowFile(ctx, path, "", jshandler.Options{}); err == nil {
			flows = shapes
		}
	}
	for i := range f.Cases {
		if err := resolveStep(&f.Cases[i], flows); err != nil {
			return nil, fmt.Errorf("case %q: %w", f.Cases[i].Name, err)
		}
	}
	version := f.PgflowVersion
	if version == "" {
		version = "0.14"
	}
	timeout := time.Duration(f.Timeout * float64(time.Second))
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	var out []Result
	for _, c := range f.Cases {
		v := version
		if c.PgflowVersion != "" {
			v = c.PgflowVersion
		}
		r, err := runCase(ctx, eng, path, len(flows) > 0, f, c, v, timeout)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// resolveStep checks a case against the flow file's Flows (none: a handler file): the step
// it names exists, its deps are that step's dependencies, a map step's case has an element.
// It fills in the flow when the file has only one.
func resolveStep(c *Case, flows []jshandler.FlowShape) error {
	if len(flows) == 0 {
		if c.Flow != "" || c.Step != "" {
			return errors.New("names a flow or step, but the file exports no Flow of @pgflow/dsl: a handler file's cases take neither")
		}
		return nil
	}
	var slugs []string
	for _, fl := range flows {
		slugs = append(slugs, fl.Slug)
	}
	if c.Flow == "" {
		if len(flows) > 1 {
			return fmt.Errorf(`the file exports %d flows (%s): say which with "flow"`, len(flows), strings.Join(slugs, ", "))
		}
		c.Flow = flows[0].Slug
	}
	i := slices.IndexFunc(flows, func(fl jshandler.FlowShape) bool { return fl.Slug == c.Flow })
	if i < 0 {
		return fmt.Errorf("the file exports no flow %q: its flows are %s", c.Flow, strings.Join(slugs, ", "))
	}
	var steps []string
	for _, s := range flows[i].Steps {
		steps = append(steps, s.Slug)
		if s.Slug != c.Step {
			continue
		}
		if (s.Type == "map") != (c.Element != nil) {
			if s.Type == "map" {
				return fmt.Errorf(`step %q is a map step: give the task's "element"`, c.Step)
			}
			return fmt.Errorf(`step %q is not a map step: it takes no "element"`, c.Step)
		}
		var deps []string
		for d := range c.Deps {
			deps = append(deps, d)
		}
		want := append([]string{}, s.DependsOn...)
		slices.Sort(deps)
		slices.Sort(want)
		if c.Element == nil && !slices.Equal(deps, want) {
			return fmt.Errorf(`step %q depends on [%s]: "deps" must give exactly their outputs, not [%s]`, c.Step, strings.Join(want, ", "), strings.Join(deps, ", "))
		}
		return nil
	}
	if c.Step == "" {
		return fmt.Errorf(`name the step of flow %q the case runs with "step": %s`, c.Flow, strings.Join(steps, ", "))
	}
	return fmt.Errorf("flow %q has no step %q: its steps are %s", c.Flow, c.Step, strings.Join(steps, ", "))
}

func runCase(ctx context.Context, eng sandbox.Engine, path string, flowFile bool, f *File, c Case, version string, timeout time.Duration) (Result, error) {
	res := Result{Name: c.Name}
	caps := sandbox.Capabilities{Step: "test case " + c.Name}
	if len(c.Env) > 0 {
		names := make([]string, 0, len(c.Env))
		for n := range c.Env {
			names = append(names, n)
		}
		caps.Env = sandbox.NewEnv(names, func(n string) (string, bool) { v, ok := c.Env[n]; return v, ok })
	}
	if len(c.HTTPAllow) > 0 {
		p := &httpcap.Policy{}
		for _, a := range c.HTTPAllow {
			pat, err := httpcap.ParsePattern(a)
			if err != nil {
				return res, fmt.Errorf("case %q: http_allow %q: %w", c.Name, a, err)
			}
			p.Allow = append(p.Allow, pat)
		}
		caps.HTTP = p
	}
	m, err := step.LoadAs(ctx, eng, &flowfile.Step{FlowFile: flowFile}, path, sandbox.ModuleConfig{MemoryLimit: f.MemoryLimit, Capabilities: caps})
	if err != nil {
		return res, err
	}
	defer m.Close(ctx)
	input, taskCtx, err := task(c, version, timeout)
	if err != nil {
		return res, fmt.Errorf("case %q: %w", c.Name, err)
	}
	out, runErr := m.Run(ctx, sandbox.Task{Input: input, Context: taskCtx, Timeout: timeout})
	res.Duration = out.Duration
	res.Problem = check(c, out, runErr)
	res.Passed = res.Problem == ""
	return res, nil
}

// task builds the ABI input and context the worker would give the case's task.
func task(c Case, version string, timeout time.Duration) (input, taskCtx []byte, err error) {
	flowInput := c.FlowInput
	if flowInput == nil {
		flowInput = json.RawMessage("null")
	}
	stepType := "single"
	deps := make([]string, 0, len(c.Deps))
	for d := range c.Deps {
		deps = append(deps, d)
	}
	slices.Sort(deps)
	if c.Element != nil {
		stepType, input = "map", c.Element
	} else {
		obj := map[string]json.RawMessage{"run": flowInput}
		for d, out := range c.Deps {
			if d == "run" {
				return nil, nil, errors.New(`"run" cannot name a dependency`)
			}
			obj[d] = out
		}
		if input, err = json.Marshal(obj); err != nil {
			return nil, nil, err
		}
	}
	attempt := max(c.Attempt, 1)
	const runID = "00000000-0000-4000-8000-000000000001"
	flow, stepSlug := "test", "step"
	if c.Step != "" {
		flow, stepSlug = c.Flow, c.Step
	}
	tc := abi.Context{RunID: runID, FlowSlug: flow, StepSlug: stepSlug, TaskIndex: c.TaskIndex, Attempt: attempt, MsgID: 1,
		FlowInput: flowInput, WorkerID: "00000000-0000-4000-8000-000000000002", TimeoutMS: timeout.Milliseconds(),
		IdempotencyKey: abi.IdempotencyKey(runID, stepSlug, c.TaskIndex), PgflowVersion: version, StepType: stepType, DependsOn: deps}
	taskCtx, err = json.Marshal(tc)
	return input, taskCtx, err
}

func check(c Case, out sandbox.Result, runErr error) string {
	var logs []string
	for _, l := range out.Logs {
		logs = append(logs, l.Message)
	}
	for _, want := range c.Logs {
		if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, want) }) {
			return fmt.Sprintf("no log line contains %q; the lines: %q", want, logs)
		}
	}
	if c.Error != "" {
		if runErr == nil {
			return fmt.Sprintf("want an error containing %q, got the output %s", c.Error, out.Output)
		}
		if !strings.Contains(runErr.Error(), c.Error) {
			return fmt.Sprintf("want an error containing %q, got: %v", c.Error, runErr)
		}
		return ""
	}
	if runErr != nil {
		return fmt.Sprintf("want the output %s, got: %v", c.Output, runErr)
	}
	var got, want any
	if err := json.Unmarshal(out.Output, &got); err != nil {
		return fmt.Sprintf("the output %s is not JSON: %v", out.Output, err)
	}
	if err := json.Unmarshal(c.Output, &want); err != nil {
		return fmt.Sprintf("the case's output %s is not JSON: %v", c.Output, err)
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("want the output %s, got %s", c.Output, out.Output)
	}
	return ""
}
