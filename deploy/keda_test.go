package deploy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// KEDAQuery is the query the Helm chart gives KEDA for queues: the chart's
// files/visible-messages.sql without its comment lines, __QUEUES__ as a SQL array, as
// templates/_helpers.tpl renders it (helm/chart_test checks the two agree).
func KEDAQuery(t *testing.T, queues ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "helm", "pgflow-wasm", "files", "visible-messages.sql"))
	must(t, err)
	sql := regexp.MustCompile(`(?m)^--.*\n`).ReplaceAllString(string(b), "")
	quoted := make([]string, len(queues))
	for i, q := range queues {
		quoted[i] = "'" + q + "'"
	}
	return strings.TrimSpace(strings.ReplaceAll(sql, "__QUEUES__", "ARRAY["+strings.Join(quoted, ",")+"]"))
}

// TestKEDAQueryCountsVisibleMessages runs the chart's KEDA query on a real database: it
// counts the visible messages of the named queues only, leaving out messages a worker holds
// (read, vt in the future), delayed ones (retries) and other queues; a queue that does not
// exist counts 0.
func TestKEDAQueryCountsVisibleMessages(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(queues ...string) int64 {
		t.Helper()
		var n int64
		q := KEDAQuery(t, queues...)
		if err := db.Pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if n := count("nothing_here"); n != 0 {
		t.Fatalf("no queues: %d", n)
	}
	// A pgflow flow: starting a run queues its root step's task.
	exec(`select pgflow.create_flow('keda_flow')`)
	exec(`select pgflow.add_step('keda_flow', 'first')`)
	exec(`select pgflow.start_flow('keda_flow', '{}'::jsonb)`)
	exec(`select pgflow.start_flow('keda_flow', '{}'::jsonb)`)
	// Plain queues: visible, held by a reader, delayed, and a queue not served.
	exec(`select pgmq.create('keda_other')`)
	exec(`select pgmq.create('keda_unserved')`)
	exec(`select pgmq.send('keda_other', '{}'::jsonb) from generate_series(1, 5)`)
	exec(`select pgmq.read('keda_other', 30, 2)`)           // held: 3 stay visible
	exec(`select pgmq.send('keda_other', '{}'::jsonb, 60)`) // a retry waiting: invisible
	exec(`select pgmq.send('keda_unserved', '{}'::jsonb) from generate_series(1, 7)`)

	if n := count("keda_flow"); n != 2 {
		t.Errorf("keda_flow: %d visible, want 2 (two runs' root tasks)", n)
	}
	if n := count("keda_flow", "keda_other", "not_created_yet"); n != 5 {
		t.Errorf("served queues: %d visible, want 5 (2 tasks + 3 messages not held nor delayed)", n)
	}
	if n := count("keda_unserved"); n != 7 {
		t.Errorf("keda_unserved: %d visible, want 7", n)
	}
}
