package taskwrite_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/uuidv4"
)

// A write's transaction reuses generic plans: pgflow's statements and the layer's, some of
// which take arrays, are not planned again at every call (package plancache).
func TestAWriteReusesGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.NewDB(t).Conn(t)
	if _, err := conn.Exec(ctx, `set plan_cache_mode = auto`); err != nil {
		t.Fatal(err)
	}
	// A task that does not exist: the guard picks nothing and the write is reported stale.
	results := make([]taskwrite.Result, 1)
	b := &pgx.Batch{}
	taskwrite.Queue(b, taskwrite.Complete, []taskwrite.Call{{RunID: uuidv4.New(), StepSlug: "s", Attempt: 1, Arg: `{}`}}, results, taskwrite.Options{})
	var during string
	b.Queue(`select current_setting('plan_cache_mode')`).QueryRow(func(r pgx.Row) error { return r.Scan(&during) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if during != "force_generic_plan" {
		t.Errorf("plan_cache_mode during a write = %q, want force_generic_plan", during)
	}
	if !results[0].Stale {
		t.Errorf("the write of a task that does not exist = %+v, want stale", results[0])
	}
}
