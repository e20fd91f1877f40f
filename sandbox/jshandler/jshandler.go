// Package jshandler runs step handlers written in TypeScript or JavaScript in the sandbox.
//
// A handler file (`export default async function handler(input, ctx)`) is bundled with
// esbuild's Go API (bundle.go), then run in QuickJS-NG compiled to WebAssembly (engine/, built
// by mk/jsengine.mk). The engine is initialised once per handler, Wizer-style: it evaluates
// the prelude (prelude/prelude.js: the web platform, ctx) and the bundle, and its memory
// is written back into the module's data (snapshot.go). The result is an ordinary ABI v1
// reactor that goes through sandbox.Engine.LoadBytes like any other module, so every task
// gets a fresh instance of the initialised engine under the step's limits and capabilities.
// Errors and log lines name the handler's source files, not the bundle (sourcemap.go).
package jshandler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler/engine"
)

// snapshotVersion changes whenever the way snapshots are made changes, so no cached one of an
// older kind is used.
const snapshotVersion = "3"

// IsSource reports whether path names a TypeScript or JavaScript handler rather than a
// WebAssembly module.
func IsSource(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".ts", ".mts", ".js", ".mjs":
		return true
	}
	return false
}

// Options tune Load. The zero value is what the worker uses.
type Options struct {
	// CacheDir keeps snapshots (by the sha256 of what they are made of) and the compiled
	// engine across processes; "" is DefaultCacheDir().
	CacheDir string
	// Fresh skips the snapshot: every instance starts QuickJS and evaluates the bundle in its
	// first task. Only for measuring what the snapshot saves.
	Fresh bool
	// LoadTimeout bounds the handler module's top-level code [sandbox.DefaultLoadTimeout].
	LoadTimeout time.Duration
	// FlowsDir is the folder of the flows file naming the handler: the project its imports
	// may read when the handler lies in it (ProjectRoot); "" finds the project by its markers.
	FlowsDir string
}

// DefaultCacheDir is $XDG_CACHE_HOME/pgflow-wasm/js (or the platform's user cache folder).
func DefaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "pgflow-wasm", "js")
}

// Module is a loaded JavaScript handler: the sandbox's module of its snapshot, whose errors
// and log lines point into the handler's sources.
type Module struct {
	sandbox.Module
	bundle      *Bundle
	memoryLimit uint64
}

// Sources are the files the handler was bundled from, the entry first: a change to any of
// them is a new handler.
func (m *Module) Sources() []string {
	out := make([]string, len(m.bundle.Inputs))
	for i, in := range m.bundle.Inputs {
		out[i] = in.Path
	}
	return out
}

// Run runs one task; see sandbox.Module.
func (m *Module) Run(ctx context.Context, t sandbox.Task) (sandbox.Result, error) {
	res, err := m.Module.Run(ctx, t)
	for i := range res.Logs {
		res.Logs[i].Message = m.bundle.Map.MapStack(res.Logs[i].Message)
	}
	return res, m.explain(err)
}

// explain maps a failure's stack to the sources and names the JavaScript reasons the
// sandbox cannot see: the engine reports running out of memory as an exception, and a stack
// overflow as an out-of-bounds access (its C stack lies below address 0: mk/jsengine.mk).
func (m *Module) explain(err error) error {
	var se *sandbox.Error
	if !errors.As(err, &se) {
		return err
	}
	e := *se
	e.Message = m.bundle.Map.MapStack(e.Message)
	first, _, _ := strings.Cut(e.Message, "\n")
	switch {
	case e.Kind == sandbox.KindHandlerError && (first == "out of memory" || first == "InternalError: out of memory"):
		e.Kind = sandbox.KindMemoryLimit
		e.Message = fmt.Sprintf("memory limit of %s reached: the JavaScript engine ran out of memory\n%s",
			bytesize.Text(m.memoryLimit), e.Message)
	case e.Kind == sandbox.KindTrap && (strings.Contains(first, "out of bounds memory access") || strings.Contains(first, "stack overflow")):
		e.Message = "the JavaScript call stack overflowed: recursion too deep for the engine's stack " +
			"(about 3,000 nested calls on wazero, 600 on wasmtime: docs/guests.md) (" + e.Message + ")"
	}
	return &e
}

// Load bundles the handler at path, snapshots the engine initialised with it (both cached by
// the sha256 of their inputs) and loads the snapshot with eng, under mc like any module.
// A handler that does not build or whose module fails while loading is an *sandbox.Error of
// kind invalid_module, with file:line:column.
func Load(ctx context.Context, eng sandbox.Engine, path string, mc sandbox.ModuleConfig, opts Options) (*Module, error) {
	return load(ctx, eng, path, Build, mc, opts)
}

// LoadFlowFile loads the @pgflow/dsl flow file at path as Load loads a handler: one snapshot
// of the file, whose handler runs the inline handler of the task's flow and step (the
// context's flow_slug and step_slug), so every task of every step of the file gets a fresh
// instance of the same initialised engine.
func LoadFlowFile(ctx context.Context, eng sandbox.Engine, path string, mc sandbox.ModuleConfig, opts Options) (*Module, error) {
	return load(ctx, eng, path, BuildFlowFile, mc, opts)
}

func load(ctx context.Context, eng sandbox.Engine, path string, buildFn func(entry, flowsDir string) (*Bundle, error),
	mc sandbox.ModuleConfig, opts Options) (*Module, error) {
	engineWasm, engineVersion, err := engine.Wasm()
	if err != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: err.Error()}
	}
	prelude, err := engine.Prelude()
	if err != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: err.Error()}
	}
	b, err := buildFn(path, opts.FlowsDir)
	if err != nil {
		var be *BuildError
		if errors.As(err, &be) {
			return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: be.Error()}
		}
		return nil, err
	}
	limit := mc.MemoryLimit
	if limit == 0 {
		limit = sandbox.DefaultMemoryLimit
	}
	snap, err := snapshotOf(ctx, engineWasm, engineVersion, prelude, withSupabase(b, mc.Capabilities), limit, opts)
	if err != nil {
		var ie *initError
		if errors.As(err, &ie) {
			return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: b.Map.MapStack(ie.msg)}
		}
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidModule, Message: "making the handler's snapshot: " + b.Map.MapStack(err.Error())}
	}
	mod, err := eng.LoadBytes(ctx, path, snap, mc)
	if err != nil {
		return nil, err
	}
	return &Module{Module: mod, bundle: b, memoryLimit: limit}, nil
}

// snapshots keeps the snapshots this process made or read, by key.
var snapshots = struct {
	sync.Mutex
	m      map[string][]byte
	caches map[string]wazero.CompilationCache // by folder ("" in memory)
}{m: map[string][]byte{}, caches: map[string]wazero.CompilationCache{}}

// maxSnapshotsInMemory bounds the process's own copies (about 1.5 MB each); the disk
// cache keeps the rest.
const maxSnapshotsInMemory = 32

func snapshotOf(ctx context.Context, engineWasm []byte, engineVersion string, prelude []byte, b *Bundle, memoryLimit uint64, opts Options) ([]byte, error) {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(snapshotVersion), engineWasm, []byte(engineVersion), prelude, b.JS, []byte(fmt.Sprint(opts.Fresh))} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	key := hex.EncodeToString(h.Sum(nil))
	dir := opts.CacheDir
	if dir == "" {
		dir = DefaultCacheDir()
	}
	cache := compilationCache(dir)
	snapshots.Lock()
	snap := snapshots.m[key]
	snapshots.Unlock()
	if snap != nil {
		return snap, nil
	}
	file := ""
	if dir != "" {
		file = filepath.Join(dir, "snapshots", key+".wasm")
		if data, err := os.ReadFile(file); err == nil && verify(data) {
			snap = data[:len(data)-sha256.Size]
			remember(key, snap)
			return snap, nil
		}
	}
	timeout := opts.LoadTimeout
	if timeout <= 0 {
		timeout = sandbox.DefaultLoadTimeout
	}
	sr := &snapshotRuntime{cache: cache}
	mem, err := sr.capture(ctx, engineWasm, prelude, b.JS, !opts.Fresh, memoryLimit, timeout)
	if err != nil {
		return nil, err
	}
	snap, err = rewrite(engineWasm, mem)
	if err != nil {
		return nil, err
	}
	remember(key, snap)
	if file != "" {
		writeCache(file, snap) // best effort: a missing cache only costs the next start a snapshot
	}
	return snap, nil
}

// compilationCache is the engine's compiled code for cache folder dir ("" is
// DefaultCacheDir()), one per folder for the process.
func compilationCache(dir string) wazero.CompilationCache {
	if dir == "" {
		dir = DefaultCacheDir()
	}
	snapshots.Lock()
	defer snapshots.Unlock()
	cache := snapshots.caches[dir]
	if cache == nil {
		cache = wazero.NewCompilationCache()
		if dir != "" {
			if c, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "wazero")); err == nil {
				cache = c
			}
		}
		snapshots.caches[dir] = cache
	}
	return cache
}

func remember(key string, snap []byte) {
	snapshots.Lock()
	defer snapshots.Unlock()
	if len(snapshots.m) >= maxSnapshotsInMemory {
		clear(snapshots.m)
	}
	snapshots.m[key] = snap
}

// A cached snapshot ends with its own sha256, so a file cut short or damaged is made again.
func verify(data []byte) bool {
	if len(data) < sha256.Size {
		return false
	}
	body := data[:len(data)-sha256.Size]
	sum := sha256.Sum256(body)
	return string(sum[:]) == string(data[len(body):])
}

func writeCache(file string, snap []byte) {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".tmp-*")
	if err != nil {
		return
	}
	sum := sha256.Sum256(snap)
	_, err = tmp.Write(append(append([]byte{}, snap...), sum[:]...))
	if cerr := tmp.Close(); err == nil && cerr == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
}
