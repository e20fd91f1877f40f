package sandbox_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// runCase is one bad (or borderline) module run as a task, with the typed error it must give.
type runCase struct {
	module  string
	input   string
	timeout time.Duration
	mc      sandbox.ModuleConfig
	kind    sandbox.Kind // "" means the task must succeed
	parts   []string     // substrings of the error message
	check   func(t *testing.T, res sandbox.Result)
}

// runCases covers design.md "Bad inputs to test" that fail at run time.
var runCases = map[string]runCase{
	"infinite loop": {module: "loop", timeout: 200 * time.Millisecond, kind: sandbox.KindTimeout,
		parts: []string{"timed out after 200ms"}},
	"deep recursion": {module: "deep_recursion", kind: sandbox.KindTrap, parts: []string{"stack"}},
	"memory bomb page by page": {module: "memory_bomb", mc: sandbox.ModuleConfig{MemoryLimit: 8 << 20},
		kind: sandbox.KindMemoryLimit, parts: []string{"memory limit of 8 MiB reached", "unreachable"}},
	"memory bomb doubling": {module: "memory_bomb_big", mc: sandbox.ModuleConfig{MemoryLimit: 8 << 20},
		kind: sandbox.KindMemoryLimit, parts: []string{"memory limit of 8 MiB reached"}},
	"C memory bomb": {module: "c_memory_bomb", mc: sandbox.ModuleConfig{MemoryLimit: 16 << 20},
		kind: sandbox.KindMemoryLimit, parts: []string{"memory limit of 16 MiB", "out of memory at"}},
	"Rust memory bomb": {module: "rust_memory_bomb", mc: sandbox.ModuleConfig{MemoryLimit: 16 << 20},
		kind: sandbox.KindMemoryLimit, parts: []string{"memory limit of 16 MiB", "memory allocation of"}},
	"Go memory bomb": {module: "go_memory_bomb", mc: sandbox.ModuleConfig{MemoryLimit: 32 << 20}, timeout: 20 * time.Second,
		kind: sandbox.KindMemoryLimit, parts: []string{"memory limit of 32 MiB", "out of memory"}},
	"8 MiB output": {module: "big_output", mc: sandbox.ModuleConfig{MemoryLimit: 16 << 20},
		kind: sandbox.KindOutputTooLarge, parts: []string{"8 MiB", "1 MiB"}},
	"invalid JSON output":  {module: "invalid_json", kind: sandbox.KindInvalidOutput, parts: []string{"not valid JSON"}},
	"invalid UTF-8 output": {module: "invalid_utf8", kind: sandbox.KindInvalidOutput, parts: []string{"not valid UTF-8"}},
	"NUL in output":        {module: "nul_output", kind: sandbox.KindInvalidOutput, parts: []string{`\u0000`}},
	"log spam": {module: "log_spam", check: func(t *testing.T, res sandbox.Result) {
		if string(res.Output) != "true" {
			t.Errorf("output %q, want true", res.Output)
		}
		if len(res.Logs) != sandbox.DefaultMaxLogBytes/100 || res.LogsDropped != 100000-len(res.Logs) {
			t.Errorf("kept %d lines and dropped %d, want %d and %d", len(res.Logs), res.LogsDropped,
				sandbox.DefaultMaxLogBytes/100, 100000-sandbox.DefaultMaxLogBytes/100)
		}
	}},
	"unreachable":    {module: "unreachable", kind: sandbox.KindTrap, parts: []string{"unreachable", "about to crash"}},
	"divide by zero": {module: "divide_by_zero", kind: sandbox.KindTrap, parts: []string{"integer divide by zero"}},
	"out of bounds":  {module: "out_of_bounds", kind: sandbox.KindTrap, parts: []string{"out of bounds memory access"}},
	"stderr then trap": {module: "stderr_trap", kind: sandbox.KindTrap,
		parts: []string{"unreachable", "stderr: panicked at src/lib.rs:3:5: boom"}},
	"stdout then trap": {module: "stdout_then", input: `"trap: panic: boom from TinyGo"`, kind: sandbox.KindTrap,
		parts: []string{"unreachable", `stdout: "trap: panic: boom from TinyGo"`}},
	"C printf then abort": {module: "c_stdout_abort", kind: sandbox.KindTrap,
		parts: []string{"unreachable", "stdout: about to abort: input of 10 bytes"}},
	"stdout then silent handler error": {module: "stdout_then", input: `"error details"`, kind: sandbox.KindHandlerError,
		parts: []string{"handler error (no message)", `stdout: "error details"`}},
	"Rust panic": {module: "rust_panic", input: `"12345"`, kind: sandbox.KindTrap,
		parts: []string{"unreachable", "boom from Rust (input was 7 bytes)"}},
	"Go panic": {module: "go_panic", kind: sandbox.KindTrap,
		parts: []string{"wasm trap", "stderr: panic: boom from Go", "goroutine 1 [running]"}},
	"AssemblyScript throw": {module: "as_throw", kind: sandbox.KindTrap,
		parts: []string{"unreachable", "boom from AssemblyScript at throw.ts:"}},
	"proc_exit(0) in a reactor": {module: "proc_exit0", kind: sandbox.KindTrap, parts: []string{"proc_exit(0)"}},
	"proc_exit(1) in a reactor": {module: "proc_exit1", kind: sandbox.KindTrap, parts: []string{"proc_exit(1)"}},
	"input_read wrap-around": {module: "bad_pointer_input", kind: sandbox.KindProtocolError,
		parts: []string{"input_read", "4294967294"}},
	"output_write wrap-around": {module: "bad_pointer_output", kind: sandbox.KindProtocolError,
		parts: []string{"output_write", "4294967040"}},
	"log past the end":       {module: "bad_pointer_log", kind: sandbox.KindProtocolError, parts: []string{"log: 65537 bytes at address 0"}},
	"error_write past end":   {module: "bad_pointer_error", kind: sandbox.KindProtocolError, parts: []string{"error_write"}},
	"unknown status code":    {module: "status7", kind: sandbox.KindProtocolError, parts: []string{"status 7"}},
	"success without output": {module: "no_output", kind: sandbox.KindProtocolError, parts: []string{"without calling output_write"}},
	"handler error":          {module: "handler_error", kind: sandbox.KindHandlerError, parts: []string{"name is required"}},
	"silent handler error":   {module: "handler_error_silent", kind: sandbox.KindHandlerError, parts: []string{"handler error (no message)"}},
	"oversized error message": {module: "big_error", kind: sandbox.KindHandlerError,
		parts: []string{"xxxx", "(49152 more bytes truncated)"}},
	"file, env, socket, clock and random access": {module: "c_wasi_libc", check: func(t *testing.T, res sandbox.Result) {
		// errno 76 is wasi-libc's ENOTCAPABLE: with no preopened directory, libc refuses
		// before asking the host; 8 is EBADF from the host's sock_accept.
		want := fmt.Sprintf(`{"file_read":false,"file_errno":76,"file_write":false,"env_home":false,"year_2022":true,"socket":false,"socket_errno":8,"random":"%x"}`,
			sandbox.RandomBytesOf(testSeed, 4))
		if string(res.Output) != want {
			t.Errorf("output\n%s\nwant\n%s", res.Output, want)
		}
	}},
	"raw WASI calls": {module: "wasi_probe", check: func(t *testing.T, res sandbox.Result) {
		want := fmt.Sprintf(`[8,8,0,0,8,8,1640995200,%d]`, binary.LittleEndian.Uint32(sandbox.RandomBytesOf(testSeed, 4)))
		if string(res.Output) != want {
			t.Errorf("output %s, want %s", res.Output, want)
		}
	}},
	"command exit code": {module: "command_fail", kind: sandbox.KindHandlerError,
		parts: []string{"exited with code 3", "stderr: bad input"}},
	"command stdout then trap": {module: "command_stdout_trap", kind: sandbox.KindTrap,
		parts: []string{"unreachable", "stdout: panic: boom from a command"}},
	"command without output": {module: "command_silent", kind: sandbox.KindInvalidOutput, parts: []string{"no output JSON"}},
}

func TestBadInputsAtRun(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		e := newEngine(t, engine, sandbox.Config{})
		for name, c := range runCases {
			t.Run(name, func(t *testing.T) {
				m := load(t, e, testModule(t, c.module), c.mc)
				timeout := c.timeout
				if timeout == 0 {
					// Generous: a case is judged by its kind, and a deep recursion on a
					// loaded machine under the race detector took over 10 s.
					timeout = time.Minute
				}
				input := c.input
				if input == "" {
					input = `{"run":{}}`
				}
				tk := task(input, timeout)
				// A deterministic step's task: random_get draws known bytes, the clock is the
				// fixed one (TestGuestsReadTheHostClockUnlessFixed reads the real one).
				tk.Seed, tk.FixedClock = testSeed, true
				res, err := m.Run(context.Background(), tk)
				if c.kind == "" {
					if err != nil {
						t.Fatalf("want success, got %v", err)
					}
				} else {
					wantKind(t, err, c.kind, c.parts...)
				}
				if c.check != nil {
					c.check(t, res)
				}
				runEcho(t, e)
			})
		}
		if n := e.Abandoned(); n != 0 {
			t.Errorf("%d calls abandoned, want 0", n)
		}
	})
}

// loadCases are modules every engine must reject at load, with the reason in the message.
var loadCases = map[string]struct {
	module string
	mc     sandbox.ModuleConfig
	parts  []string
}{
	"missing export":           {module: "missing_handle", parts: []string{"missing export pgflow_handle (i32, i32) -> i32", "_start"}},
	"missing version export":   {module: "missing_version", parts: []string{"missing export pgflow_abi_version () -> i32"}},
	"memory not exported":      {module: "missing_memory", parts: []string{`missing export "memory"`}},
	"wrong signature":          {module: "wrong_signature", parts: []string{"export pgflow_handle has signature (i32) -> i32", "(i32, i32) -> i32"}},
	"wrong import signature":   {module: "wrong_import_signature", parts: []string{"import pgflow.log has signature (i32, i32) -> ()", "(i32, i32, i32) -> ()"}},
	"unknown import":           {module: "unknown_import", parts: []string{"import env.abort is not allowed", "--use abort="}},
	"unknown pgflow import":    {module: "unknown_pgflow_import", parts: []string{"import pgflow.http_get is not part of ABI v1"}},
	"imported memory":          {module: "imported_memory", parts: []string{"import env.memory is a memory"}},
	"shared memory":            {module: "shared_memory", parts: []string{"shared (threads)"}},
	"memory minimum too large": {module: "memory_min_too_big", parts: []string{"memory minimum of 2000 pages (125 MiB) exceeds the step's memory_limit of 64 MiB"}},
	"memory minimum over a small limit": {module: "echo", mc: sandbox.ModuleConfig{MemoryLimit: 64 << 10},
		parts: []string{}}, // echo needs 1 page: accepted (the boundary); see TestMemoryLimitBoundary
	"both modes":        {module: "both_modes", parts: []string{"both pgflow_handle and _start"}},
	"ABI version 2":     {module: "abi_v2", parts: []string{"ABI version 2", "supports [1]"}},
	"start never ends":  {module: "start_loop", parts: []string{"timed out after 500ms"}},
	"_initialize traps": {module: "init_trap", parts: []string{"trap", "_initialize"}},
}

func TestBadInputsAtLoad(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		e := newEngine(t, engine, sandbox.Config{LoadTimeout: 500 * time.Millisecond})
		for name, c := range loadCases {
			t.Run(name, func(t *testing.T) {
				m, err := e.Load(context.Background(), testModule(t, c.module), c.mc)
				if len(c.parts) == 0 {
					if err != nil {
						t.Fatalf("want the module accepted, got %v", err)
					}
					_ = m.Close(context.Background())
				} else {
					if err == nil {
						_ = m.Close(context.Background())
					}
					wantKind(t, err, sandbox.KindInvalidModule, c.parts...)
				}
				runEcho(t, e)
			})
		}
	})
}

func TestNotWasmAndOversized(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	echo, err := os.ReadFile(testModule(t, "echo"))
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file one byte over the default cap: rejected from its size alone.
	huge := filepath.Join(dir, "huge.wasm")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(sandbox.DefaultMaxModuleBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cases := map[string]struct {
		path  string
		cfg   sandbox.Config
		parts []string
	}{
		"text file":            {path: write("text.wasm", []byte("hello, I am not wasm\n")), parts: []string{"not a WebAssembly module"}},
		"empty file":           {path: write("empty.wasm", nil), parts: []string{"not a WebAssembly module"}},
		"truncated":            {path: write("truncated.wasm", echo[:len(echo)-10]), parts: []string{"runs past the end of the file"}},
		"component":            {path: write("component.wasm", []byte("\x00asm\x0d\x00\x01\x00")), parts: []string{"component"}},
		"missing file":         {path: filepath.Join(dir, "nope.wasm"), parts: []string{"cannot read module", "no such file"}},
		"directory":            {path: dir, parts: []string{"is a directory"}},
		"over the default cap": {path: huge, parts: []string{"over the size cap of 64 MiB"}},
		"over a configured cap": {path: testModule(t, "c_command"), cfg: sandbox.Config{MaxModuleBytes: 1000},
			parts: []string{"over the size cap of 1000 bytes"}},
	}
	forEachEngine(t, func(t *testing.T, engine string) {
		for name, c := range cases {
			t.Run(name, func(t *testing.T) {
				e := newEngine(t, engine, c.cfg)
				_, err := e.Load(context.Background(), c.path, sandbox.ModuleConfig{})
				wantKind(t, err, sandbox.KindInvalidModule, c.parts...)
				runEcho(t, e)
			})
		}
	})
}
