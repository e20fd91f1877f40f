package sandbox

import (
	"fmt"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// checkImports names every import the host refuses, not just the first, each with a hint
// when the way a toolchain ends up with it is known: a user fixes them all in one go.
func checkImports(m *wasmfile.Module, _ ModuleConfig) error {
	type problem struct {
		name, why, hint string
		foreign         bool // outside pgflow.* and wasi_snapshot_preview1.*: why is the rule
	}
	rule := fmt.Sprintf("modules may import only %s.* and %s.*", abi.ImportModule, abi.WASIModule)
	var problems []problem
	foreign := 0
	for _, im := range m.Imports {
		full := im.Module + "." + im.Name
		p := problem{name: full, hint: importHint(im.Module, im.Name)}
		if im.Kind != wasmfile.KindFunc {
			p.why = fmt.Sprintf("is a %s: modules may import only functions", im.Kind)
			problems = append(problems, p)
			continue
		}
		f, ok := hostFuncIndex[[2]string{im.Module, im.Name}]
		switch {
		case ok && !f.sig.Equal(im.Type):
			p.why = fmt.Sprintf("has signature %s, but the host provides %s", im.Type, f.sig)
		case ok:
			continue
		case im.Module == abi.ImportModule:
			p.why = fmt.Sprintf("is not part of ABI v%d (it provides %s)", abi.Version, strings.Join(pgflowImportNames(), ", "))
		case im.Module == abi.WASIModule:
			p.why = "is not a WASI preview 1 function this host provides"
		default:
			p.why, p.foreign = "is not allowed: "+rule, true
			foreign++
		}
		problems = append(problems, p)
	}
	switch len(problems) {
	case 0:
		return nil
	case 1:
		p := problems[0]
		return invalid("import %s %s%s", p.name, p.why, parenthesized(p.hint))
	}
	// Several: the rule once, then each import with what is known about it.
	var b strings.Builder
	fmt.Fprintf(&b, "%d imports are refused", len(problems))
	if foreign > 0 {
		fmt.Fprintf(&b, " (%s)", rule)
	}
	b.WriteString(":")
	for i, p := range problems {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" " + p.name)
		if !p.foreign {
			b.WriteString(" " + p.why)
		}
		b.WriteString(parenthesized(p.hint))
	}
	return invalid("%s", b.String())
}

func parenthesized(hint string) string {
	if hint == "" {
		return ""
	}
	return " (" + hint + ")"
}

// Hints for imports by exact module.name: what put them there and what to do instead.
var importHints = map[string]string{
	"env.abort":    "AssemblyScript: build with --use abort=<your function>, as the guest library does",
	"env.seed":     "AssemblyScript's Math.random: there is no JavaScript host to seed it; pass random values in the input",
	"env.Date.now": "AssemblyScript's Date.now or new Date() call JavaScript: pass times in the input",
	"env.trace":    "AssemblyScript's trace(): log with the guest library's log(Level.Debug, ...)",
	"env.memory":   "export the module's own memory instead of importing one",
	"wasi_snapshot_preview1.sock_open": "sockets are not available to handlers: make HTTP requests through the " +
		"guest library, as the step's http key in flows.yaml allows",
}

// Hints for imports by prefix of module.name, tried in order after the exact ones.
var importPrefixHints = []struct{ prefix, hint string }{
	{"env.console.", "AssemblyScript's console.log, .info, .warn or .error: log with the guest library's log(Level.Info, ...)"},
	{"env.process.", "AssemblyScript's process: handlers have no process, arguments or environment; named values come from config()"},
	{"wasi_unstable.", "this is WASI snapshot 0: rebuild for wasi_snapshot_preview1"},
	{"__wbindgen_placeholder__.", "Rust: wasm-bindgen (used by js-sys, web-sys, getrandom's js feature, chrono's wasmbind...) " +
		"is for JavaScript hosts; remove that dependency or feature"},
	{"__wbindgen_externref_xform__.", "Rust: wasm-bindgen is for JavaScript hosts; remove that dependency or feature"},
	{"wbg.", "Rust: wasm-bindgen is for JavaScript hosts; remove that dependency or feature"},
	{"gojs.", "built with GOOS=js: build handlers with GOOS=wasip1 -buildmode=c-shared, or TinyGo -target=wasip1"},
	{"wasi:", "WASI preview 2 (components) is not supported: build a core module for wasm32-wasip1 (Rust: " +
		"wasm32-unknown-unknown or wasm32-wasi); a handler has no file system either (std::fs fails, see docs/sandbox.md)"},
	{"emscripten", "Emscripten's runtime imports are for its JavaScript glue: build with clang --target=wasm32-wasi instead"},
}

// importHint explains an import the host refuses, or returns "".
func importHint(module, name string) string {
	full := module + "." + name
	if h, ok := importHints[full]; ok {
		return h
	}
	for _, p := range importPrefixHints {
		if strings.HasPrefix(full, p.prefix) {
			return p.hint
		}
	}
	return ""
}
