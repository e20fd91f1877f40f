package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// A run of a flow no worker serves would wait silently forever: start says so at once.
func TestStartWarnsAtOnceWhenNoWorkerServesTheFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	flows := writeFile(t, "flows.yaml", fmt.Sprintf("flows:\n  - slug: unserved\n    steps:\n      - {slug: e, module: %q}\n",
		module(t, "modules/testdata/echo.wasm")))
	dbEnv := []string{"DATABASE_URL=" + db.URL}
	if _, errOut, code := runBinary(t, dbEnv, "compile", "--flows", flows); code != 0 {
		t.Fatalf("compile: exit %d: %s", code, errOut)
	}
	began := time.Now()
	_, errOut, code := runBinary(t, dbEnv, "start", "unserved", "--wait", "--timeout", "2s")
	if code != 1 {
		t.Errorf("exit %d, want 1 (gave up waiting)", code)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "warning: no live worker serves flow unserved (no worker has ever served it)") ||
		!strings.Contains(lines[1], "gave up waiting after 2s") {
		t.Errorf("stderr:\n%s", errOut)
	}
	if took := time.Since(began); took > time.Minute {
		t.Errorf("took %s", took)
	}
	// Without --wait too: the run id on stdout, the warning on stderr.
	out, errOut, code := runBinary(t, dbEnv, "start", "unserved")
	if code != 0 || len(strings.TrimSpace(out)) != 36 || !strings.Contains(errOut, "warning: no live worker serves flow unserved") {
		t.Errorf("start without --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
