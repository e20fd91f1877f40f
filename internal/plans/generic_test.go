package plans_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/plans"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// modes sets the session's plan cache mode, then reads it in a transaction after
// QueueGeneric and again in the next transaction.
func modes(t *testing.T, session string) (during, after string) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.NewDB(t).Conn(t)
	if _, err := conn.Exec(ctx, `select set_config('plan_cache_mode', $1, false)`, session); err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	plans.QueueGeneric(b)
	b.Queue(`select current_setting('plan_cache_mode')`).QueryRow(func(r pgx.Row) error { return r.Scan(&during) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil { // one implicit transaction
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `select current_setting('plan_cache_mode')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	return during, after
}

func TestGenericPlansLastTheTransaction(t *testing.T) {
	t.Parallel()
	if during, after := modes(t, "auto"); during != "force_generic_plan" || after != "auto" {
		t.Errorf("plan_cache_mode %q in the transaction, %q after it; want force_generic_plan, then auto", during, after)
	}
}

// A session, role or database that chose a mode keeps it.
func TestAChosenPlanCacheModeIsKept(t *testing.T) {
	t.Parallel()
	if during, _ := modes(t, "force_custom_plan"); during != "force_custom_plan" {
		t.Errorf("plan_cache_mode %q in the transaction, want the session's force_custom_plan", during)
	}
}
