package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// A reactor's stdout (where TinyGo prints its panics) is kept, capped, for the message of
// a failed call only: never in a successful result, never carried to the next task.
func TestStdoutInFailures(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, engine string) {
		t.Parallel()
		e := newEngine(t, engine, sandbox.Config{})
		m := load(t, e, testModule(t, "stdout_then"), sandbox.ModuleConfig{ReuseInstance: true})
		run := func(input string) (sandbox.Result, error) {
			return m.Run(context.Background(), task(input, 5*time.Second))
		}

		res, err := run(`"ok, printed on stdout"`)
		if err != nil || string(res.Output) != "true" || len(res.Logs) != 0 {
			t.Fatalf("success: output %q, logs %v, error %v; want true and no logs", res.Output, res.Logs, err)
		}
		// The same instance: the previous task's stdout is gone.
		_, err = run(`"trap after printing"`)
		wantKind(t, err, sandbox.KindTrap, `stdout: "trap after printing"`)
		if strings.Contains(err.Error(), "ok, printed") {
			t.Errorf("the message carries an earlier task's stdout: %v", err)
		}

		// Over MaxErrorBytes: the start is kept, the rest counted.
		big := `"t` + strings.Repeat("x", 40<<10) + `"`
		_, err = run(big)
		dropped := len(big) - sandbox.DefaultMaxErrorBytes
		wantKind(t, err, sandbox.KindTrap, fmt.Sprintf("(%d more bytes truncated)", dropped))
		if n := len(err.(*sandbox.Error).Message); n > sandbox.DefaultMaxErrorBytes+200 {
			t.Errorf("message of %d bytes, want about %d", n, sandbox.DefaultMaxErrorBytes)
		}
	})
}
