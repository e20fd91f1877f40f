// Package buildinfo says what a binary is: its version and commit (set by make through
// -ldflags -X), the sandbox engines compiled in and the pgflow SQL embedded. A binary built
// with a plain `go build` has neither the SQL nor wasmtime, and Missing says so and how to
// get them, because operators otherwise find out only when `db install` or `--engine
// wasmtime` fails.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/schema/pgflowsql"
)

// Set by make: go build -ldflags "-X .../internal/buildinfo.version=v1.2.3 -X ...commit=abc".
// Unset, they are read from the Go toolchain's VCS stamp.
var (
	version string
	commit  string
)

// Info describes this binary.
type Info struct {
	Version   string   // make's `git describe`, or "devel-<commit>" from a plain build
	Commit    string   // full commit hash, "+dirty" when the tree had changes; "" unknown
	Engines   []string // sandbox engines compiled in
	PgflowSQL string   // version of the embedded pgflow SQL; "" when none is embedded
	Go        string   // toolchain
	Platform  string   // GOOS/GOARCH
	Release   bool     // built by make (version set through -ldflags)
}

// Get describes this binary.
func Get() Info {
	in := Info{Version: version, Commit: commit, Engines: sandbox.Engines(), Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Release: version != ""}
	if _, v, ok := pgflowsql.Migrations(); ok {
		in.PgflowSQL = v
	}
	if in.Version == "" || in.Commit == "" {
		rev, dirty := vcs()
		if in.Commit == "" && rev != "" {
			in.Commit = rev + dirty
		}
		if in.Version == "" {
			in.Version = "devel"
			if rev != "" {
				in.Version = "devel-" + rev[:min(12, len(rev))] + dirty
			}
		}
	}
	return in
}

// vcs reads the commit the Go toolchain stamped into a build from a checkout.
func vcs() (rev, dirty string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", ""
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	return rev, dirty
}

// EngineList is the engines joined by "+", e.g. "wazero+wasmtime" (a label value).
func (in Info) EngineList() string { return strings.Join(in.Engines, "+") }

// Missing lists what this binary lacks that a `make build` binary has, each with what it
// costs and how to get it; nil for a complete build.
func (in Info) Missing() []string {
	var out []string
	if in.PgflowSQL == "" {
		out = append(out, "pgflow's SQL is not embedded: `db install` needs --migrations DIR "+
			"(make build copies the pinned release from npm into schema/pgflowsql before compiling)")
	}
	if !slices.Contains(in.Engines, sandbox.EngineWasmtime) {
		out = append(out, "the wasmtime engine is not compiled in: only --engine wazero works "+
			"(make build compiles with -tags wasmtime and cgo)")
	}
	return out
}

// String is the multi-line text of `--version`.
func (in Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pgflow-wasm %s\n", in.Version)
	commit := in.Commit
	if commit == "" {
		commit = "unknown"
	}
	sql := in.PgflowSQL
	if sql == "" {
		sql = "none embedded"
	}
	fmt.Fprintf(&b, "  commit:     %s\n", commit)
	fmt.Fprintf(&b, "  engines:    %s\n", strings.Join(in.Engines, ", "))
	fmt.Fprintf(&b, "  pgflow SQL: %s\n", sql)
	fmt.Fprintf(&b, "  built with: %s for %s\n", in.Go, in.Platform)
	for i, m := range in.Missing() {
		if i == 0 {
			b.WriteString("this binary lacks:\n")
		}
		fmt.Fprintf(&b, "  - %s\n", m)
	}
	return b.String()
}
