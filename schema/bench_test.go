package schema_test

import (
	"context"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// BenchmarkInstall measures a full install (pgmq layer, realtime.send, 12 migrations) into
// an empty database; creating the database is not timed.
func BenchmarkInstall(b *testing.B) {
	for _, mode := range []schema.LayerMode{schema.LayerExtension, schema.LayerSchema} {
		b.Run(string(mode), func(b *testing.B) {
			ctx := context.Background()
			dir := migrationsDirTB(b)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				conn, err := schema.Connect(ctx, pgtest.NewDB(b, pgtest.Empty()).URL)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: dir, Layer: mode}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				conn.Close(ctx)
				b.StartTimer()
			}
		})
	}
}

// BenchmarkPgmqCycle is one message through the layer: send, read, archive (three calls).
func BenchmarkPgmqCycle(b *testing.B) {
	for _, mode := range []schema.LayerMode{schema.LayerExtension, schema.LayerSchema} {
		b.Run(string(mode), func(b *testing.B) {
			ctx := context.Background()
			db := pgtest.NewDB(b, pgtest.Layer(mode))
			if _, err := db.Pool.Exec(ctx, `SELECT pgmq.create('bench')`); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var id int64
				if err := db.Pool.QueryRow(ctx, `SELECT * FROM pgmq.send('bench', '{"n": 1}'::jsonb)`).Scan(&id); err != nil {
					b.Fatal(err)
				}
				var got int64
				if err := db.Pool.QueryRow(ctx, `SELECT msg_id FROM pgmq.read('bench', 30, 1)`).Scan(&got); err != nil {
					b.Fatal(err)
				}
				if _, err := db.Pool.Exec(ctx, `SELECT pgmq.archive('bench', $1::bigint)`, got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLayerVersions runs sends and one-message archives inside the server (a DO block
// of 100 of each per op, so no round trip is timed) on the layer's first version and on the
// current one, each in a database with ten other queues: what the static statements save.
func BenchmarkLayerVersions(b *testing.B) {
	versions := map[string]func(b *testing.B) *pgtest.DB{
		schema.BaseLayerVersion: func(b *testing.B) *pgtest.DB {
			db := pgtest.NewDB(b, pgtest.Empty())
			installBaseLayer(b, db.Pool)
			return db
		},
		schema.LayerVersion: func(b *testing.B) *pgtest.DB { return pgtest.NewDB(b, pgtest.Layer(schema.LayerSchema)) },
	}
	for version, open := range versions {
		b.Run(version, func(b *testing.B) {
			ctx := context.Background()
			db := open(b)
			if _, err := db.Pool.Exec(ctx, `SELECT pgmq.create('other_' || i) FROM generate_series(1, 10) AS i; SELECT pgmq.create('bench')`); err != nil {
				b.Fatal(err)
			}
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			cycle := `DO $$ DECLARE id bigint; BEGIN FOR i IN 1..100 LOOP
				id := pgmq.send('bench', '{"n": 1}'::jsonb); PERFORM pgmq.archive('bench', id); END LOOP; END $$`
			if _, err := conn.Exec(ctx, cycle); err != nil { // the session's plans, as a worker's
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := conn.Exec(ctx, cycle); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/100, "µs/send+archive")
		})
	}
}
