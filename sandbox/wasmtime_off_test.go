//go:build !wasmtime

package sandbox_test

import (
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func TestWasmtimeNeedsBuildTag(t *testing.T) {
	t.Parallel()
	_, err := sandbox.New(sandbox.EngineWasmtime, sandbox.Config{})
	if err == nil || !strings.Contains(err.Error(), "-tags wasmtime") {
		t.Errorf("New(wasmtime) without the tag: %v", err)
	}
}
