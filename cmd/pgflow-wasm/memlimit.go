package main

import (
	"fmt"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// Go's soft memory limit for serve (docs/RATIONALE.md "Defaults: 32 handlers at once, batches
// of 32, GOGC 400 and a soft memory limit"). GOGC 400 lets the heap grow to five times its live size, and the live heap
// grows with the handlers running: each holds its instance's structures and call stack in the
// Go heap (about 0.35 MB for a TypeScript task, mostly wazero's call stack). The limit caps that
// growth, which let a busy TypeScript worker reach twice the resident memory of a C one; it
// leaves each running handler twice what it holds, so a larger --concurrency raises it.
const (
	memoryLimitBase       = 16 << 20
	memoryLimitPerHandler = 768 << 10
)

// softMemoryLimit reads --soft-memory-limit: "auto", a size such as 96MiB, or 0 for none.
func softMemoryLimit(value string, concurrency int) (int64, error) {
	if value == "auto" {
		return memoryLimitBase + int64(max(concurrency, 1))*memoryLimitPerHandler, nil
	}
	n, ok := bytesize.Parse(value)
	if !ok {
		return 0, fmt.Errorf("--soft-memory-limit: %q is not auto, 0 or a size such as 96MiB", value)
	}
	return int64(n), nil
}
