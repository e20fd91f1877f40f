package main_test

import (
	"strings"
	"testing"
)

// exec runs a module once without a database: its output on success, its error and exit 1
// on failure.
func TestExecRunsAModuleWithoutADatabase(t *testing.T) {
	t.Parallel()
	out, errOut, code := runBinary(t, nil, "exec", module(t, "modules/examples/c/greet.wasm"), "--input", `{"run": {"name": "Ada"}}`)
	if code != 0 || strings.TrimSpace(out) != `{"greeting":"Hello, Ada!"}` {
		t.Errorf("exec greet: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code = runBinary(t, nil, "exec", module(t, "modules/testdata/fail.wasm"))
	if code != 1 || out != "" || !strings.Contains(errOut, "handler failed after") || !strings.Contains(errOut, "handler_error: always fails") {
		t.Errorf("exec fail: exit %d, %q %q", code, out, errOut)
	}
	// A TypeScript handler: bundled as the worker does it, its flow input the input's "run",
	// its error at the file and line of the throw.
	out, errOut, code = runBinary(t, nil, "exec", module(t, "modules/examples/typescript/greet.ts"), "--input", `{"run": {"name": "Ada"}}`)
	if code != 0 || strings.TrimSpace(out) != `{"greeting":"Hello, Ada!"}` {
		t.Errorf("exec greet.ts: exit %d, %q %q", code, out, errOut)
	}
	_, errOut, code = runBinary(t, nil, "exec", module(t, "modules/examples/typescript/greet.ts"), "--input", `{"run": {}}`)
	if code != 1 || !strings.Contains(errOut, "handler_error: greet: the flow input's name must be a string\n    at greet (greet.ts:8:") {
		t.Errorf("exec greet.ts without a name: exit %d, %q", code, errOut)
	}
	_, errOut, code = runBinary(t, nil, "exec", module(t, "modules/testdata/spin.wasm"), "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "timeout") {
		t.Errorf("exec spin: exit %d, %q", code, errOut)
	}
}
