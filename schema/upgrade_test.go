package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// The catalogue fingerprint changes with a migration, or any function of pgflow's replaced,
// and not with pgflow's own work or with VACUUM and ANALYZE.
func TestTheCatalogueFingerprintChangesWithPgflowsSchemaOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
	if fp, err := schema.CatalogueFingerprint(ctx, conn); err != nil || fp != "" {
		t.Fatalf("without pgflow: %q, %v; want \"\"", fp, err)
	}
	if _, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: pgtest.PgflowRelease(t, 12), Layer: schema.LayerSchema}); err != nil {
		t.Fatal(err)
	}
	fp := func() string {
		t.Helper()
		got, err := schema.CatalogueFingerprint(ctx, conn)
		if err != nil || got == "" {
			t.Fatalf("fingerprint: %q, %v", got, err)
		}
		return got
	}
	before := fp()
	for _, q := range []string{
		`select pgflow.create_flow('f')`, `select pgflow.add_step('f', 'a')`,
		`select pgflow.start_flow('f', '{}')`, `vacuum analyze pgflow.runs`, `analyze pgflow.step_tasks`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if got := fp(); got != before {
		t.Fatalf("pgflow's own work and VACUUM changed the fingerprint")
	}
	var def string
	if err := conn.QueryRow(ctx, `select pg_get_functiondef('pgflow.complete_task'::regproc)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, def); err != nil {
		t.Fatal(err)
	}
	replaced := fp()
	if replaced == before {
		t.Fatal("replacing pgflow.complete_task left the fingerprint as it was")
	}
	if _, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: pgtest.PgflowRelease(t, 13), Layer: schema.LayerSchema}); err != nil {
		t.Fatal(err)
	}
	if fp() == replaced {
		t.Fatal("a migration left the fingerprint as it was")
	}
	if name, release := schema.NewestMigration(ctx, conn); name != "20251130000000_pgflow_auto_compilation.sql" || release == "" {
		t.Errorf("NewestMigration = %q, %q; want the 13th migration and its release", name, release)
	}
}

// A migration waits for a worker's transaction that holds the upgrade lock shared, and a
// worker's transaction started meanwhile waits for the migration: neither sees the other's
// half.
func TestAMigrationAndAWorkersTransactionWaitForEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t, pgtest.Empty())
	installer, worker := connect(t, db.URL), connect(t, db.URL)
	if _, err := schema.Install(ctx, installer, schema.Options{MigrationsDir: pgtest.PgflowRelease(t, 12), Layer: schema.LayerSchema}); err != nil {
		t.Fatal(err)
	}
	tx, err := worker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, schema.UpgradeLockShared); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := schema.Install(ctx, installer, schema.Options{MigrationsDir: pgtest.PgflowRelease(t, 13), Layer: schema.LayerSchema})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the migration did not wait for the worker's transaction (%v)", err)
	case <-time.After(time.Second):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the migration did not go on once the worker's transaction ended")
	}
	if name, _ := schema.NewestMigration(ctx, worker); name != "20251130000000_pgflow_auto_compilation.sql" {
		t.Errorf("newest migration %q, want the 13th", name)
	}
}
