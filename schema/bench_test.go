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
