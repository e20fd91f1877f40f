package sqlsession_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// The SQL imports through the sandbox, on every engine of the build, with a real session:
// a statement's result, each way a call fails (an error code for the guest, the task ended
// by a limit, the deadline during a statement, no grant), and the ABI's edges (a partial
// copy returns the whole length, pointers past the guest's memory).
func TestSQLThroughTheSandbox(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	root := workertest.RepoRoot(t)
	sqlCall := filepath.Join(root, "modules/testdata/sql_call.wasm")
	abiEdges := filepath.Join(root, "sandbox/testdata/build/sql_abi.wasm")
	for _, p := range []string{sqlCall, abiEdges} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing: run `make testmodules sandbox-testdata`", p)
		}
	}
	for _, engine := range sandbox.Engines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			e := workertest.Engine(t, engine)
			load := func(path string) sandbox.Module {
				m, err := e.Load(context.Background(), path, sandbox.ModuleConfig{Capabilities: sandbox.Capabilities{Step: "step \"s\""}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = m.Close(context.Background()) })
				return m
			}
			g := a.grant(true)
			g.MaxRows = 10
			run := func(m sandbox.Module, input string, timeout time.Duration, withSQL bool) (sandbox.Result, error) {
				task := sandbox.Task{Input: []byte(input), Context: []byte(`{}`), Timeout: timeout}
				if withSQL {
					s := g.Begin(time.Now().Add(timeout))
					defer s.Close()
					task.SQL = s
				}
				return m.Run(context.Background(), task)
			}
			want := func(err error, kind sandbox.Kind, part string) {
				t.Helper()
				var se *sandbox.Error
				if !errors.As(err, &se) || se.Kind != kind || !strings.Contains(se.Message, part) {
					t.Errorf("error %v, want %s containing %q", err, kind, part)
				}
			}
			m := load(sqlCall)
			res, err := run(m, `{"run":{"statements":[{"sql":"select $1::int + 1 as n","params":[41]}]}}`, 10*time.Second, true)
			if err != nil || string(res.Output) != `{"results":[{"columns":["n"],"rows":[[42]],"row_count":1,"command":"SELECT 1"}]}` {
				t.Errorf("select: %s, %v", res.Output, err)
			}
			_, err = run(m, `{"run":{"statements":[{"sql":"select 1"}]}}`, 10*time.Second, false)
			want(err, sandbox.KindHandlerError, `sql: step "s" may not run SQL: it has no `+"`sql`"+` key in flows.yaml`)
			_, err = run(m, `{"run":{"statements":[{"sql":"select * from pgflow.runs"}]}}`, 10*time.Second, true)
			want(err, sandbox.KindHandlerError, "sql: permission denied for schema pgflow (SQLSTATE 42501)")
			_, err = run(m, `{"run":{"statements":[{"sql":"select generate_series(1, 100)"}]}}`, 10*time.Second, true)
			want(err, sandbox.KindSQL, "returned more than the 10 rows of its sql.max_rows")
			start := time.Now()
			_, err = run(m, `{"run":{"statements":[{"sql":"select pg_sleep(600)"}]}}`, 500*time.Millisecond, true)
			want(err, sandbox.KindTimeout, "while waiting for an SQL statement")
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("the deadline stopped pg_sleep(600) after %s", took)
			}

			m = load(abiEdges)
			if res, err := run(m, `1`, 10*time.Second, true); err != nil || string(res.Output) != `"{\"c"` {
				t.Errorf("partial sql_result_read: %s, %v", res.Output, err)
			}
			if res, err := run(m, `123`, 10*time.Second, true); err != nil || string(res.Output) != `0` {
				t.Errorf("sql_result_read before any call: %s, %v", res.Output, err)
			}
			_, err = run(m, `12`, 10*time.Second, true)
			want(err, sandbox.KindProtocolError, "sql_query: 1000 bytes at address 65000 are outside the guest memory")
			_, err = run(m, `1234`, 10*time.Second, true)
			want(err, sandbox.KindProtocolError, "sql_result_read: ")
		})
	}
}
