// Package testbin builds the pgflow-wasm binary for tests that run it as a user would: once
// per test process, into a temporary folder that Remove deletes (call it from TestMain).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
)

// binary is one command of the checkout, built once per test process.
type binary struct {
	once sync.Once
	path string
	err  error
}

var (
	mu       sync.Mutex
	dir      string
	binaries = map[string]*binary{}
)

// Path builds cmd/pgflow-wasm of the checkout the test runs in, the first time it is called,
// and returns the binary's path.
func Path() (string, error) { return Build("pgflow-wasm") }

// Build builds cmd/<name> of the checkout the test runs in, the first time it is called for
// name, into the same folder as the others, and returns the binary's path.
func Build(name string) (string, error) {
	mu.Lock()
	b := binaries[name]
	if b == nil {
		b = &binary{}
		binaries[name] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		var root string
		if root, b.err = localpg.RepoRoot("."); b.err != nil {
			return
		}
		mu.Lock()
		if dir == "" {
			dir, b.err = os.MkdirTemp("", "pgflow-wasm-bin-")
		}
		d := dir
		mu.Unlock()
		if b.err != nil {
			return
		}
		b.path = filepath.Join(d, name)
		build := exec.Command("go", "build", "-o", b.path, "./cmd/"+name)
		build.Dir = root
		if out, berr := build.CombinedOutput(); berr != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", name, berr, out)
		}
	})
	return b.path, b.err
}

// Remove deletes the binaries Build built, if it built any.
func Remove() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
}
