package pgtest_test

import (
	"context"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

func TestNewDBIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := pgtest.NewDB(t)
	b := pgtest.NewDB(t)
	if a.Name == b.Name {
		t.Fatalf("two tests share database %s", a.Name)
	}
	if _, err := a.Pool.Exec(ctx, `SELECT pgflow.create_flow('only_in_a', 3, 1, 60)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM pgflow.flows WHERE flow_slug = 'only_in_a'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a flow created in %s is visible in %s", a.Name, b.Name)
	}
	conn := a.Conn(t)
	st, err := schema.Status(ctx, conn, "")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Installed() {
		t.Fatalf("template clone not fully installed: %v", st.Problems())
	}
}

func TestLayerVariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode      schema.LayerMode
		extension bool
	}{{schema.LayerSchema, false}, {schema.LayerExtension, true}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t, pgtest.Layer(tc.mode))
			st, err := schema.Status(context.Background(), db.Conn(t), "")
			if err != nil {
				t.Fatal(err)
			}
			if st.Pgmq.Kind != schema.PgmqLayer || st.Pgmq.Extension != tc.extension {
				t.Fatalf("want the pgflow-wasm layer (extension=%v), got %s", tc.extension, st.Pgmq)
			}
			if len(st.Migrations) != 12 {
				t.Fatalf("want 12 migrations recorded, got %d", len(st.Migrations))
			}
		})
	}
}

func TestEmptyHasNothingInstalled(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Empty())
	st, err := schema.Status(context.Background(), db.Conn(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Pgmq.Kind != schema.PgmqMissing || st.Realtime.Kind != schema.RealtimeMissing || len(st.Migrations) != 0 || st.PgflowSchema {
		t.Fatalf("empty database is not empty: %+v", st)
	}
}

func TestDropsDatabaseOnCleanup(t *testing.T) {
	t.Parallel()
	var name string
	admin := pgtest.NewDB(t, pgtest.Empty())
	t.Run("inner", func(t *testing.T) {
		name = pgtest.NewDB(t).Name
	})
	var exists bool
	if err := admin.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

// BenchmarkNewDB measures NewDB once the template exists: CREATE DATABASE ... TEMPLATE
// and the pool (the drop happens at cleanup, after the timing).
func BenchmarkNewDB(b *testing.B) {
	pgtest.NewDB(b) // builds the template (if no earlier run did) outside the timing
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pgtest.NewDB(b)
	}
}

// BenchmarkNewCluster measures a private cluster: initdb, start, and (at cleanup, untimed
// by the loop's end) stop and removal.
func BenchmarkNewCluster(b *testing.B) {
	for i := 0; i < b.N; i++ {
		pgtest.NewCluster(b)
	}
}
