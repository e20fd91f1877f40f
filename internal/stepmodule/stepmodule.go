// Package stepmodule loads a step's handler whatever its language: a WebAssembly module as
// it is, a TypeScript or JavaScript file through package jshandler. The worker, validate,
// module inspect and the dashboard all load steps here, so each sees what the worker runs.
package stepmodule

import (
	"context"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/jshandler"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Load loads the module of step with eng under mc (step.ModuleConfig() plus the step's
// capabilities).
func Load(ctx context.Context, eng sandbox.Engine, step *flowfile.Step, mc sandbox.ModuleConfig) (sandbox.Module, error) {
	return LoadPath(ctx, eng, step.Module, step.FlowsDir, mc)
}

// LoadPath loads the handler at path: a .wasm module, or a .ts, .mts, .js or .mjs file.
// flowsDir is the folder of the flows file naming it ("" when none does): a TypeScript or
// JavaScript handler in that folder may import its files (jshandler.ProjectRoot).
func LoadPath(ctx context.Context, eng sandbox.Engine, path, flowsDir string, mc sandbox.ModuleConfig) (sandbox.Module, error) {
	if jshandler.IsSource(path) {
		m, err := jshandler.Load(ctx, eng, path, mc, jshandler.Options{FlowsDir: flowsDir})
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	return eng.Load(ctx, path, mc)
}

// Sources lists the files a loaded module was made from besides its own path (the imports
// of a TypeScript or JavaScript handler); nil for a WebAssembly module.
func Sources(m sandbox.Module) []string {
	if js, ok := m.(*jshandler.Module); ok {
		return js.Sources()[1:]
	}
	return nil
}
