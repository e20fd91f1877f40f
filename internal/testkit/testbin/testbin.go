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

var (
	once sync.Once
	path string
	err  error
)

// Path builds cmd/pgflow-wasm of the checkout the test runs in, the first time it is called,
// and returns the binary's path.
func Path() (string, error) {
	once.Do(func() {
		var root, dir string
		if root, err = localpg.RepoRoot("."); err != nil {
			return
		}
		if dir, err = os.MkdirTemp("", "pgflow-wasm-bin-"); err != nil {
			return
		}
		path = filepath.Join(dir, "pgflow-wasm")
		build := exec.Command("go", "build", "-o", path, "./cmd/pgflow-wasm")
		build.Dir = root
		if out, berr := build.CombinedOutput(); berr != nil {
			err = fmt.Errorf("building pgflow-wasm: %v\n%s", berr, out)
		}
	})
	return path, err
}

// Remove deletes the binary Path built, if it built one.
func Remove() {
	if path != "" {
		os.RemoveAll(filepath.Dir(path))
	}
}
