package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// Modes of a module (Info.Mode).
const (
	ModeReactor = "reactor"
	ModeCommand = "command"
)

// maxMemoryLimit is the largest memory limit honoured: 65535 pages, so sizes fit in 32 bits.
const maxMemoryLimit = (1<<16 - 1) * wasmfile.PageSize

// Inspect reads, hashes and statically validates the module at path against cfg and mc,
// without compiling it (so Info.ABIVersion stays 0: the version is only known by calling
// the module, which Engine.Load does). It returns as much Info as the file allows and a
// *Error of KindInvalidModule when the module would be rejected at load.
func Inspect(path string, cfg Config, mc ModuleConfig) (Info, error) {
	cfg = cfg.withDefaults()
	wasm, info, err := readModule(path, cfg.MaxModuleBytes)
	if err != nil {
		return info, err
	}
	_, err = validate(wasm, &info, cfg, mc.withDefaults())
	return info, err
}

// readModule reads the file with a size cap and fills Path, Size and SHA256.
func readModule(path string, maxBytes int64) ([]byte, Info, error) {
	info := Info{Path: path}
	f, err := os.Open(path)
	if err != nil {
		return nil, info, invalid("cannot read module: %v", unwrapPathError(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, info, invalid("cannot read module: %v", unwrapPathError(err))
	}
	if st.IsDir() {
		return nil, info, invalid("%s is a directory, not a module file", path)
	}
	info.Size = st.Size()
	if st.Size() > maxBytes {
		return nil, info, invalid("module is %s, over the size cap of %s", bytesize.Text(uint64(st.Size())), bytesize.Text(uint64(maxBytes)))
	}
	// Read one byte past the cap in case the file grew after Stat.
	wasm, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, info, invalid("cannot read module: %v", unwrapPathError(err))
	}
	info.Size = int64(len(wasm))
	if info.Size > maxBytes {
		return nil, info, invalid("module is over the size cap of %s", bytesize.Text(uint64(maxBytes)))
	}
	sum := sha256.Sum256(wasm)
	info.SHA256 = hex.EncodeToString(sum[:])
	return wasm, info, nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

func invalid(format string, args ...any) *Error {
	return &Error{Kind: KindInvalidModule, Message: fmt.Sprintf(format, args...)}
}

// validate parses wasm, fills info and applies every static rule of the sandbox.
func validate(wasm []byte, info *Info, cfg Config, mc ModuleConfig) (*wasmfile.Module, error) {
	m, err := wasmfile.Parse(wasm)
	if err != nil {
		return nil, invalid("%v", err)
	}
	describe(m, info)
	for _, check := range []func(*wasmfile.Module, ModuleConfig) error{checkImports, checkMemory, checkExports} {
		if err := check(m, mc); err != nil {
			return m, err
		}
	}
	return m, checkSize(m, cfg)
}

// checkSize bounds what compiling costs: engines take time and memory in proportion to the
// number of functions and to the size of the largest body (wazero took 80 s and 4.6 GB
// for 15.5 million empty functions, 19 s and 3.7 GB for one 60 MB body).
func checkSize(m *wasmfile.Module, cfg Config) error {
	if n := max(len(m.Funcs), m.Bodies); n > cfg.MaxFunctions {
		return invalid("the module defines %d functions, over the limit of %d (Config.MaxFunctions)", n, cfg.MaxFunctions)
	}
	if m.LargestBody > cfg.MaxFunctionBytes {
		return invalid("function %d has a body of %s, over the limit of %s per function (Config.MaxFunctionBytes)",
			m.LargestBodyIndex, bytesize.Text(uint64(m.LargestBody)), bytesize.Text(uint64(cfg.MaxFunctionBytes)))
	}
	return nil
}

// describe fills the Info fields that come from the module's structure.
func describe(m *wasmfile.Module, info *Info) {
	info.Imports = info.Imports[:0]
	for _, im := range m.Imports {
		s := im.Kind.String()
		if im.Kind == wasmfile.KindFunc {
			s = im.Type.String()
		}
		info.Imports = append(info.Imports, Func{Module: im.Module, Name: im.Name, Signature: s})
	}
	info.Exports = info.Exports[:0]
	for _, e := range m.Exports {
		s := e.Kind.String()
		if e.Kind == wasmfile.KindFunc {
			if t, ok := m.FuncTypeOf(e.Index); ok {
				s = t.String()
			}
		}
		info.Exports = append(info.Exports, Func{Name: e.Name, Signature: s})
	}
	if len(m.Memories) > 0 {
		info.MemoryMinPages = uint32(min(m.Memories[0].Min, 1<<32-1))
		if m.Memories[0].HasMax {
			info.MemoryMaxPages = uint32(min(m.Memories[0].Max, 1<<32-1))
		}
	}
	switch {
	case hasExport(m, abi.ExportHandle):
		info.Mode = ModeReactor
	case hasExport(m, abi.ExportStart):
		info.Mode = ModeCommand
	}
}

func hasExport(m *wasmfile.Module, name string) bool {
	_, ok := m.Export(name)
	return ok
}

// checkImports is in importhints.go, with the hints that explain forbidden imports.

func pgflowImportNames() []string {
	var names []string
	for n := range abi.ImportParams {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func checkMemory(m *wasmfile.Module, mc ModuleConfig) error {
	if m.ImportedMemories() > 0 {
		return invalid("the module imports its memory: it must define and export its own")
	}
	if len(m.Memories) == 0 {
		return invalid("the module defines no memory: it must export one named %q", abi.ExportMemory)
	}
	if len(m.Memories) > 1 {
		return invalid("the module defines %d memories: exactly one is supported", len(m.Memories))
	}
	mem := m.Memories[0]
	if mem.Shared {
		return invalid("the module's memory is shared (threads): shared memory and threads are not supported")
	}
	if mem.Is64 {
		return invalid("the module's memory is 64-bit (memory64): only 32-bit memory is supported")
	}
	if mem.Min*wasmfile.PageSize > mc.MemoryLimit {
		return invalid("memory minimum of %d pages (%s) exceeds the step's memory_limit of %s",
			mem.Min, bytesize.Text(mem.Min*wasmfile.PageSize), bytesize.Text(mc.MemoryLimit))
	}
	e, ok := m.Export(abi.ExportMemory)
	if !ok {
		return invalid("missing export %q: the module must export its memory under that name", abi.ExportMemory)
	}
	if e.Kind != wasmfile.KindMemory {
		return invalid("export %q is a %s, not a memory", abi.ExportMemory, e.Kind)
	}
	return nil
}

// Required export signatures.
var (
	sigHandle     = wasmfile.FuncType{Params: i32s(2), Results: i32s(1)}
	sigABIVersion = wasmfile.FuncType{Results: i32s(1)}
	sigVoid       = wasmfile.FuncType{}
)

func checkExports(m *wasmfile.Module, _ ModuleConfig) error {
	_, hasHandle := m.Export(abi.ExportHandle)
	_, hasStart := m.Export(abi.ExportStart)
	switch {
	case hasHandle && hasStart:
		return invalid("the module exports both %s and %s: build handlers as reactors (C: -mexec-model=reactor, Go/TinyGo: -buildmode=c-shared) or as a plain WASI command without %s",
			abi.ExportHandle, abi.ExportStart, abi.ExportHandle)
	case hasHandle:
		if err := checkFuncExport(m, abi.ExportHandle, sigHandle, true); err != nil {
			return err
		}
		if err := checkFuncExport(m, abi.ExportABIVersion, sigABIVersion, true); err != nil {
			return err
		}
		return checkFuncExport(m, abi.ExportInitialize, sigVoid, false)
	case hasStart:
		if err := checkFuncExport(m, abi.ExportStart, sigVoid, true); err != nil {
			return err
		}
		return checkFuncExport(m, abi.ExportABIVersion, sigABIVersion, false)
	}
	return invalid("missing export %s %s (reactor mode) or %s () -> () (command mode)", abi.ExportHandle, sigHandle, abi.ExportStart)
}

func checkFuncExport(m *wasmfile.Module, name string, want wasmfile.FuncType, required bool) error {
	e, ok := m.Export(name)
	if !ok {
		if required {
			return invalid("missing export %s %s", name, want)
		}
		return nil
	}
	if e.Kind != wasmfile.KindFunc {
		return invalid("export %s is a %s, not a function %s", name, e.Kind, want)
	}
	got, ok := m.FuncTypeOf(e.Index)
	if !ok {
		return invalid("export %s refers to function %d, which does not exist", name, e.Index)
	}
	if !got.Equal(want) {
		return invalid("export %s has signature %s, ABI v%d needs %s", name, got, abi.Version, want)
	}
	return nil
}
