package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// GrantWorker makes a login that is not a superuser and may do what serve does: read and
// write pgflow's tables, call its functions (on a queue compiled after the grant too), read
// the step proof key; run twice, it changes nothing; a superuser is refused.
func TestGrantWorkerMakesALoginThatServes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	login := db.Role(t, "grant_worker", "LOGIN") // made by the test, so that it is dropped after
	conn := connect(t, db.URL)
	for range 2 {
		if _, err := schema.GrantWorker(ctx, conn, login, ""); err != nil {
			t.Fatal(err)
		}
	}
	as := db.PoolAs(t, login)
	var super bool
	var runs, keys int
	if err := as.QueryRow(ctx, `select rolsuper from pg_roles where rolname = current_user`).Scan(&super); err != nil || super {
		t.Fatalf("superuser %v, %v", super, err)
	}
	if err := as.QueryRow(ctx, `select (select count(*) from pgflow.runs), (select count(*) from pgflow_wasm.step_proof_key)`).Scan(&runs, &keys); err != nil || keys != 1 {
		t.Fatalf("as the login: %d runs, %d keys, %v", runs, keys, err)
	}
	// A flow compiled after the grant (its queue table new): the default privileges cover it.
	if _, err := db.Pool.Exec(ctx, `select pgflow.create_flow('granted_flow'); select pgflow.add_step('granted_flow', 'a')`); err != nil {
		t.Fatal(err)
	}
	if _, err := as.Exec(ctx, `select pgflow.start_flow('granted_flow', '{}'::jsonb)`); err != nil {
		t.Fatalf("as the login, a run of a flow compiled after the grant: %v", err)
	}
	super2 := db.Role(t, "grant_super", "LOGIN SUPERUSER")
	if _, err := schema.GrantWorker(ctx, conn, super2, ""); err == nil || !strings.Contains(err.Error(), "is a superuser") {
		t.Errorf("a superuser login: %v, want it refused", err)
	}
}
