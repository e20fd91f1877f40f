package schema_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// A real pgmq cannot be installed on these machines (no apt, npm or Go module ships it),
// so the "real pgmq" paths are tested with a fixture extension in a private cluster's own
// extension folder: a control file that does not carry our marker, versions 1.4.0 (a
// message_record without headers) and 1.5.0 (a pgmq-compatible API: our layer's SQL minus
// its marker function). The installer must treat it as foreign: use it, never install the
// layer beside it, and refuse it when it is older than 1.5.

func fixtureControl(defaultVersion string) []byte {
	return []byte("# test fixture: stands in for a real pgmq extension\n" +
		"comment = 'Test fixture standing in for the real pgmq extension'\n" +
		"default_version = '" + defaultVersion + "'\n" +
		"relocatable = false\nschema = pgmq\n")
}

func fixtureFiles() map[string][]byte {
	return map[string][]byte{
		"pgmq.control": fixtureControl("1.5.0"),
		"pgmq--1.4.0.sql": []byte(`CREATE TABLE pgmq.meta (queue_name varchar NOT NULL UNIQUE);
CREATE TYPE pgmq.message_record AS (msg_id bigint, read_ct integer, enqueued_at timestamptz, vt timestamptz, message jsonb);
`),
		"pgmq--1.5.0.sql": []byte(schema.LayerSQLWithoutMarker()),
	}
}

func TestRealPgmq(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t, pgtest.ExtensionFiles(fixtureFiles()))
	ctx := context.Background()
	setDefault := func(version string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(c.ExtensionDir(), "pgmq.control"), fixtureControl(version), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The subtests share the cluster's extension folder: they run in order.

	t.Run("offered but too old", func(t *testing.T) {
		setDefault("1.4.0")
		defer setDefault("1.5.0")
		conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
		_, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: migrationsDir(t)})
		var old *schema.PgmqTooOldError
		want := "pgmq 1.4.0 is too old: pgflow 0.8.1 needs pgmq >= 1.5 (message_record.headers)"
		if !errors.As(err, &old) || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("Install: %v\nwant: %s", err, want)
		}
		st, err := schema.Status(ctx, conn, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pgmq.Kind != schema.PgmqMissing || len(st.Migrations) != 0 {
			t.Fatalf("a refused install left %s and %d migrations", st.Pgmq, len(st.Migrations))
		}
	})

	t.Run("installed but too old", func(t *testing.T) {
		conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
		if _, err := conn.Exec(ctx, `CREATE SCHEMA pgmq; CREATE EXTENSION pgmq WITH SCHEMA pgmq VERSION '1.4.0'`); err != nil {
			t.Fatal(err)
		}
		_, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: migrationsDir(t)})
		if err == nil || !strings.HasPrefix(err.Error(), "pgmq 1.4.0 is too old") || !strings.Contains(err.Error(), "ALTER EXTENSION pgmq UPDATE") {
			t.Fatalf("Install over pgmq 1.4.0: %v", err)
		}
	})

	t.Run("offered and new enough: used, layer not installed", func(t *testing.T) {
		conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
		rep := install(t, conn, schema.Options{})
		if rep.PgmqAction != "created" || rep.Pgmq.Kind != schema.PgmqReal || rep.Pgmq.Version != "1.5.0" || len(rep.Applied) != 12 {
			t.Fatalf("install: %s %s, %d migrations", rep.PgmqAction, rep.Pgmq, len(rep.Applied))
		}
		st, err := schema.Status(ctx, conn, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Pgmq.String(); got != "pgmq 1.5.0 (real extension)" || !st.Installed() {
			t.Fatalf("status: %q, problems %v", got, st.Problems())
		}
		for _, m := range st.Migrations {
			if m.SkippedPgmq {
				t.Fatalf("%s skipped CREATE EXTENSION although pgmq is an extension", m.Name)
			}
		}
		var marker bool
		conn.QueryRow(ctx, `SELECT to_regprocedure('pgmq.pgflow_wasm_layer()') IS NOT NULL`).Scan(&marker)
		if marker {
			t.Fatal("our layer's marker exists beside a real pgmq")
		}
		if _, err := os.Stat(filepath.Join(c.ExtensionDir(), "pgmq--"+schema.BaseLayerVersion+".sql")); err == nil {
			t.Fatal("our extension files were written beside a real pgmq")
		}
		// pgflow runs on it.
		if _, err := conn.Exec(ctx, `SELECT pgflow.create_flow('onreal', 3, 1, 60); SELECT pgflow.add_step('onreal', 'a');
			SELECT pgflow.start_flow('onreal', '{}')`); err != nil {
			t.Fatal(err)
		}
		var n int
		conn.QueryRow(ctx, `SELECT count(*) FROM pgmq.read('onreal', 30, 10)`).Scan(&n)
		if n != 1 {
			t.Fatalf("read %d messages from the real pgmq, want 1", n)
		}
	})

	t.Run("already installed: kept", func(t *testing.T) {
		conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
		if _, err := conn.Exec(ctx, `CREATE SCHEMA pgmq; CREATE EXTENSION pgmq WITH SCHEMA pgmq`); err != nil {
			t.Fatal(err)
		}
		rep := install(t, conn, schema.Options{})
		if rep.PgmqAction != "kept" || rep.Pgmq.Kind != schema.PgmqReal || len(rep.Applied) != 12 {
			t.Fatalf("install: %s %s", rep.PgmqAction, rep.Pgmq)
		}
		_, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: migrationsDir(t), Layer: schema.LayerSchema})
		if err == nil || !strings.Contains(err.Error(), "layer is not needed") {
			t.Fatalf("forcing the layer over a real pgmq: %v", err)
		}
	})

	t.Run("never overwrites a foreign control file", func(t *testing.T) {
		conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
		_, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: migrationsDir(t), Layer: schema.LayerExtension})
		if err == nil || !strings.Contains(err.Error(), "not pgflow-wasm's: left untouched") {
			t.Fatalf("forced extension layer where a real pgmq.control exists: %v", err)
		}
		b, _ := os.ReadFile(filepath.Join(c.ExtensionDir(), "pgmq.control"))
		if !strings.Contains(string(b), "Test fixture") {
			t.Fatalf("pgmq.control was changed:\n%s", b)
		}
	})
}
