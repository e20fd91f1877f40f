package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Load a handler once, then run it once per task: each Run gets a fresh instance.
func Example() {
	ctx := context.Background()
	engine, err := sandbox.New("wazero", sandbox.Config{})
	if err != nil {
		panic(err)
	}
	defer engine.Close(ctx)

	greet, err := engine.Load(ctx, filepath.Join(repoRoot(), "modules/examples/c/greet.wasm"), sandbox.ModuleConfig{MemoryLimit: 16 << 20})
	if err != nil {
		fmt.Println(err) // a module that is missing or rejected, with the reason
		return
	}
	res, err := greet.Run(ctx, sandbox.Task{
		Input:   []byte(`{"run": {"name": "Ada"}}`),
		Context: []byte(`{"run_id": "00000000-0000-0000-0000-000000000000", "attempt": 1}`),
		Timeout: 5 * time.Second,
	})
	fmt.Println(string(res.Output), err)

	// A handler error is typed; so are traps, timeouts, memory limits and bad outputs.
	_, err = greet.Run(ctx, sandbox.Task{Input: []byte(`{"run": {}}`), Context: []byte(`{}`), Timeout: 5 * time.Second})
	var se *sandbox.Error
	if errors.As(err, &se) {
		fmt.Println(se.Kind, "-", se.Message)
	}
	// Output:
	// {"greeting":"Hello, Ada!"} <nil>
	// handler_error - greet: input.run.name must be a string
}
