package sandbox_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func TestInspect(t *testing.T) {
	t.Parallel()
	path := testModule(t, "echo")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	info, err := sandbox.Inspect(path, sandbox.Config{}, sandbox.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Info{
		Path: path, Size: int64(len(raw)), SHA256: hex.EncodeToString(sum[:]), Mode: sandbox.ModeReactor,
		Imports: []sandbox.Func{
			{Module: "pgflow", Name: "input_read", Signature: "(i32) -> ()"},
			{Module: "pgflow", Name: "output_write", Signature: "(i32, i32) -> ()"},
			{Module: "pgflow", Name: "log", Signature: "(i32, i32, i32) -> ()"},
		},
		Exports: []sandbox.Func{
			{Name: "memory", Signature: "memory"},
			{Name: "pgflow_abi_version", Signature: "() -> i32"},
			{Name: "pgflow_handle", Signature: "(i32, i32) -> i32"},
		},
		MemoryMinPages: 1,
	}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("Inspect =\n%+v\nwant\n%+v", info, want)
	}
	// Load knows the ABI version too, by asking the module.
	forEachEngine(t, func(t *testing.T, engine string) {
		m := load(t, newEngine(t, engine, sandbox.Config{}), path, sandbox.ModuleConfig{})
		want.ABIVersion = 1
		got := m.Info()
		if !strings.HasPrefix(got.Compilation, engine+", ") {
			t.Errorf("Load Info.Compilation = %q, want how %s compiled it", got.Compilation, engine)
		}
		got.Compilation = "" // Inspect compiles nothing
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Load Info =\n%+v\nwant\n%+v", got, want)
		}
	})
}

func TestInspectRejected(t *testing.T) {
	t.Parallel()
	info, err := sandbox.Inspect(testModule(t, "unknown_import"), sandbox.Config{}, sandbox.ModuleConfig{})
	wantKind(t, err, sandbox.KindInvalidModule, "env.abort")
	if info.Mode != sandbox.ModeReactor || len(info.Imports) != 1 || info.SHA256 == "" {
		t.Errorf("a rejected module still gets its Info: %+v", info)
	}
	info, err = sandbox.Inspect(testModule(t, "shared_memory"), sandbox.Config{}, sandbox.ModuleConfig{})
	wantKind(t, err, sandbox.KindInvalidModule, "shared")
	if info.MemoryMinPages != 1 || info.MemoryMaxPages != 1 {
		t.Errorf("memory %d..%d, want 1..1", info.MemoryMinPages, info.MemoryMaxPages)
	}
	// The memory limit is part of the verdict.
	_, err = sandbox.Inspect(testModule(t, "big_output"), sandbox.Config{}, sandbox.ModuleConfig{MemoryLimit: 8 << 20})
	wantKind(t, err, sandbox.KindInvalidModule, "129 pages")
	info, err = sandbox.Inspect(testModule(t, "command_echo"), sandbox.Config{}, sandbox.ModuleConfig{})
	if err != nil || info.Mode != sandbox.ModeCommand {
		t.Errorf("command module: %+v, %v", info, err)
	}
}

// LoadBytes is Load for a module made in memory: the same Info (under the given name), the
// same checks, the same size cap.
func TestLoadBytes(t *testing.T) {
	t.Parallel()
	path := testModule(t, "echo")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	forEachEngine(t, func(t *testing.T, engine string) {
		e := newEngine(t, engine, sandbox.Config{MaxModuleBytes: int64(len(raw))})
		fromFile := load(t, e, path, sandbox.ModuleConfig{})
		m, err := e.LoadBytes(context.Background(), "made/in/memory.wasm", raw, sandbox.ModuleConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(context.Background())
		want := fromFile.Info()
		want.Path = "made/in/memory.wasm"
		if got := m.Info(); !reflect.DeepEqual(got, want) {
			t.Errorf("LoadBytes Info =\n%+v\nwant\n%+v", got, want)
		}
		res, err := m.Run(context.Background(), task(`{"a":1}`, 5*time.Second))
		if err != nil || string(res.Output) != `{"a":1}` {
			t.Errorf("Run: %s, %v", res.Output, err)
		}
		bad, err := os.ReadFile(testModule(t, "unknown_import"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.LoadBytes(context.Background(), "bad.wasm", bad, sandbox.ModuleConfig{})
		wantKind(t, err, sandbox.KindInvalidModule, "env.abort")
		_, err = e.LoadBytes(context.Background(), "big.wasm", append(raw, 0), sandbox.ModuleConfig{})
		wantKind(t, err, sandbox.KindInvalidModule, "over the size cap")
		_, err = e.LoadBytes(context.Background(), "tiny.wasm", raw, sandbox.ModuleConfig{MemoryLimit: 100})
		if err == nil || !strings.Contains(err.Error(), "below one 64 KiB page") {
			t.Errorf("a memory limit below a page: %v", err)
		}
	})
}
