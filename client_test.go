package pgflowwasm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// A timeout changed in flows.yaml is in force for the next task once the client reloaded
// the file: no command, no restart (options are written at every reload; the shape is not).
func TestAChangedTimeoutIsInForceAfterTheReload(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	root, _ := filepath.Abs(".")
	path := filepath.Join(t.TempDir(), "flows.yaml")
	write := func(timeout int) {
		text := fmt.Sprintf("flows:\n  - slug: slow\n    max_attempts: 1\n    timeout: %d\n    steps:\n      - {slug: s, module: %s}\n",
			timeout, filepath.Join(root, "modules/testdata/spin.wasm"))
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	client, err := pgflowwasm.NewClient(db.Pool, pgflowwasm.Config{FlowsPath: path, WatchInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Stop(ctx)
	runOnce := func() string {
		id, err := client.StartRun(ctx, "slow", map[string]int{})
		if err != nil {
			t.Fatal(err)
		}
		waiting, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		r, err := client.WaitRun(waiting, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Error
	}
	if msg := runOnce(); !strings.Contains(msg, "Task timed out after 1s") {
		t.Fatalf("first run: %q, want a 1 s timeout", msg)
	}
	before := client.WorkerIDs()["slow"]
	write(2)
	deadline := time.Now().Add(30 * time.Second)
	for client.WorkerIDs()["slow"] == before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if client.WorkerIDs()["slow"] == before {
		t.Fatal("the changed file was not reloaded")
	}
	if msg := runOnce(); !strings.Contains(msg, "Task timed out after 2s") {
		t.Fatalf("after the reload: %q, want the new 2 s timeout", msg)
	}
}
