// Package step sets a step up the one way, for every caller (the worker, replay, validate,
// the dashboard's module view): its handler loaded whatever its language (a WebAssembly
// module as it is, a TypeScript or JavaScript file through package jshandler) with its
// limits and capabilities, its SQL grant, and the context JSON its tasks get.
package step

import (
	"context"
	"log/slog"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// Load loads the module of step s of flow fl in file with eng, as the worker runs it: its
// limits (s.ModuleConfig()) and its capabilities (Capabilities; m and log may be nil).
// Every caller (the worker, validate, the dashboard's module view) loads steps here, so
// each sees what the worker runs.
func Load(ctx context.Context, eng sandbox.Engine, file *flowfile.File, fl *flowfile.Flow, s *flowfile.Step,
	m *telemetry.Metrics, log *slog.Logger) (sandbox.Module, error) {
	mc := s.ModuleConfig()
	mc.Capabilities = Capabilities(file, fl, s, m, log)
	return LoadAs(ctx, eng, s, s.Module, mc)
}

// LoadAs loads the file at path as step s's handler with mc: a @pgflow/dsl flow file when s
// is a step of one (its inline handler for the task's flow and step), else a handler file or
// module (LoadPath). replay loads a step's fixed module (--module) through it.
func LoadAs(ctx context.Context, eng sandbox.Engine, s *flowfile.Step, path string, mc sandbox.ModuleConfig) (sandbox.Module, error) {
	if s.FlowFile {
		mod, err := jshandler.LoadFlowFile(ctx, eng, path, mc, jshandler.Options{FlowsDir: s.FlowsDir})
		if err != nil {
			return nil, err
		}
		return mod, nil
	}
	return LoadPath(ctx, eng, path, s.FlowsDir, mc)
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
