package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// sandboxTestModule is a module built by `make sandbox-testdata`.
func sandboxTestModule(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "sandbox", "testdata", "build", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test module %s is missing: run `make sandbox-testdata`", p)
	}
	return p
}

func inspectExit(err error) int {
	if err == nil {
		return 0
	}
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	return 1
}

func TestModuleInspectAccepted(t *testing.T) {
	t.Parallel()
	path := sandboxTestModule(t, "echo")
	out, err := runCLI(t, "module", "inspect", "--cache-dir", "", path)
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	for _, want := range []string{
		"file:         " + path, "size:         237 bytes", "mode:         reactor", "abi version:  1",
		"memory:       min 1 pages (64 KiB), no maximum; limit 64MiB", "engine:       wazero",
		"imports (3):", "pgflow.input_read    (i32) -> ()", "pgflow.log           (i32, i32, i32) -> ()",
		"exports (3):", "pgflow_handle       (i32, i32) -> i32", "accepted: yes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestModuleInspectRejected(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"unknown import": {[]string{sandboxTestModule(t, "unknown_import")}, "accepted: no (import env.abort is not allowed"},
		"memory limit":   {[]string{"--memory-limit", "4MiB", sandboxTestModule(t, "big_output")}, "accepted: no (memory minimum of 129 pages (8.06 MiB) exceeds the step's memory_limit of 4 MiB)"},
		"ABI version":    {[]string{sandboxTestModule(t, "abi_v2")}, "accepted: no (the module speaks ABI version 2"},
		"not wasm":       {[]string{filepath.Join("..", "..", "go.mod")}, "accepted: no (not a WebAssembly module"},
	} {
		out, err := runCLI(t, append([]string{"module", "inspect", "--cache-dir", ""}, c.args...)...)
		if inspectExit(err) != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, output:\n%s\nwant exit 1 and %q", name, inspectExit(err), out, c.want)
		}
	}
}

func TestModuleInspectJSON(t *testing.T) {
	t.Parallel()
	out, err := runCLI(t, "module", "inspect", "--json", "--cache-dir", "", "--memory-limit", "512KiB", sandboxTestModule(t, "echo"))
	if err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	var got inspection
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !got.Accepted || got.ABIVersion != 1 || got.Mode != "reactor" || got.MemoryLimit != 512<<10 ||
		len(got.Imports) != 3 || got.Imports[2].Signature != "(i32, i32, i32) -> ()" || len(got.SHA256) != 64 {
		t.Errorf("unexpected inspection: %+v", got)
	}
	if !strings.Contains(out, `"signature": "(i32) -> ()"`) {
		t.Errorf("signatures are not written plainly:\n%s", out)
	}
}

func TestModuleInspectUsage(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no file":        {"module", "inspect"},
		"bad size":       {"module", "inspect", "--memory-limit", "12XB", "x.wasm"},
		"zero size":      {"module", "inspect", "--memory-limit", "0", "x.wasm"},
		"unknown engine": {"module", "inspect", "--engine", "v8", "x.wasm"},
		"two files":      {"module", "inspect", "a.wasm", "b.wasm"},
	} {
		out, err := runCLI(t, args...)
		if inspectExit(err) != 2 {
			t.Errorf("%s: exit %d (%v), want 2\n%s", name, inspectExit(err), err, out)
		}
	}
}
