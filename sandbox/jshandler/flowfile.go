package jshandler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler/engine"
)

// flowEntryName is the name source maps and stacks give the entry of a flow file's bundle.
const flowEntryName = "pgflow-wasm:flow-entry.js"

// shapeMarker starts the one line the flow entry logs while it loads: the shape of the flows.
const shapeMarker = "\x00pgflow-wasm:flows "

// flowEntry is the script a flow file is bundled behind. It imports the file, finds every
// exported Flow of @pgflow/dsl (the user's own copy, read through its public members: slug,
// options, stepOrder, getStepDefinition), logs their shape once, and exports the handler
// that runs the inline handler of the task's flow and step.
func flowEntry(file string) string {
	spec, _ := json.Marshal("./" + filepath.Base(file))
	name, _ := json.Marshal(filepath.Base(file))
	return `import * as file from ` + string(spec) + `;
const fileName = ` + string(name) + `;
const isFlow = (v) => v !== null && typeof v === "object" && typeof v.slug === "string" &&
  Array.isArray(v.stepOrder) && typeof v.getStepDefinition === "function";
const known = new Set(["slug", "handler", "dependencies", "options", "stepType"]);
const flows = [];
const handlers = new Map();
for (const name of Object.keys(file).sort((a, b) => (a === "default") - (b === "default") || (a < b ? -1 : a > b ? 1 : 0))) {
  const flow = file[name];
  if (!isFlow(flow)) continue;
  const same = flows.find((f) => f.flow === flow);
  if (same) { same.shape.exports.push(name); continue; }
  const steps = new Map();
  const shape = { exports: [name], slug: flow.slug, options: { ...(flow.options ?? {}) }, steps: [] };
  for (const slug of flow.stepOrder) {
    const d = flow.getStepDefinition(slug);
    shape.steps.push({
      slug: d.slug, type: d.stepType ?? "single", dependsOn: [...(d.dependencies ?? [])],
      options: { ...(d.options ?? {}) }, handler: typeof d.handler === "function",
      unknown: Object.keys(d).filter((k) => !known.has(k)),
    });
    if (typeof d.handler === "function") steps.set(d.slug, d.handler);
  }
  flows.push({ flow, shape });
  if (!handlers.has(flow.slug)) handlers.set(flow.slug, steps);
}
console.log(` + fmt.Sprintf("%q", shapeMarker) + ` + JSON.stringify(flows.map((f) => f.shape)));
export default function handler(input, ctx) {
  const t = ctx.stepTask;
  const run = handlers.get(t.flow_slug)?.get(t.step_slug);
  if (run === undefined) throw new Error(fileName + " exports no flow " + JSON.stringify(t.flow_slug) + " with a step " + JSON.stringify(t.step_slug));
  return run(input, ctx);
}
`
}

// FlowShape is one Flow a flow file exports, as @pgflow/dsl holds it.
type FlowShape struct {
	// Exports are the names the file exports the flow under ("default" last).
	Exports []string        `json:"exports"`
	Slug    string          `json:"slug"`
	Options map[string]any  `json:"options"`
	Steps   []FlowStepShape `json:"steps"`
}

// FlowStepShape is one step of a FlowShape, in the order the flow defines them.
type FlowStepShape struct {
	Slug      string         `json:"slug"`
	Type      string         `json:"type"` // "single" or "map"
	DependsOn []string       `json:"dependsOn"`
	Options   map[string]any `json:"options"`
	Handler   bool           `json:"handler"` // the step has an inline handler function
	// Unknown are members of the step's definition this worker does not know (from a newer
	// @pgflow/dsl): the caller refuses the step rather than serve it differently.
	Unknown []string `json:"unknown"`
}

// DescribeFlowFile bundles the flow file at path (as Load bundles a handler: the same
// project confinement, npm: and jsr: specifiers) and evaluates it in the engine with every
// capability refused, and returns the Flows it exports. A file that does not build or
// whose top-level code throws is an *sandbox.Error of kind invalid_module with file:line.
func DescribeFlowFile(ctx context.Context, path, flowsDir string, opts Options) ([]FlowShape, error) {
	engineWasm, _, err := engine.Wasm()
	if err != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: err.Error()}
	}
	prelude, err := engine.Prelude()
	if err != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: err.Error()}
	}
	b, err := BuildFlowFile(path, flowsDir)
	if err != nil {
		var be *BuildError
		if errors.As(err, &be) {
			return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: be.Error()}
		}
		return nil, err
	}
	timeout := opts.LoadTimeout
	if timeout <= 0 {
		timeout = sandbox.DefaultLoadTimeout
	}
	sr := &snapshotRuntime{cache: compilationCache(opts.CacheDir)}
	if _, err := sr.capture(ctx, engineWasm, prelude, b.JS, true, sandbox.DefaultMemoryLimit, timeout); err != nil {
		var ie *initError
		if errors.As(err, &ie) {
			return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: b.Map.MapStack(ie.msg)}
		}
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: "evaluating the flow file: " + b.Map.MapStack(err.Error())}
	}
	for _, l := range sr.logs {
		if rest, ok := strings.CutPrefix(l, shapeMarker); ok {
			var flows []FlowShape
			if err := json.Unmarshal([]byte(rest), &flows); err != nil {
				return nil, fmt.Errorf("%s: reading the flows' shape: %w", path, err)
			}
			return flows, nil
		}
	}
	return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule,
		Message: path + ": the flow file's entry logged no shape (did the file's top-level code replace console.log?)"}
}
