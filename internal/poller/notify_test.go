package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Inserts into a queue notify on any pgmq: the layer's and pgmq 1.8's enable_notify_insert,
// or, on the real pgmq 1.5.1 that has none, a trigger of our own, dropped again once pgmq can
// notify itself.
func TestInsertNotifyOnEveryPgmq(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T) *pgtest.DB{
		"real pgmq 1.5.1": func(t *testing.T) *pgtest.DB {
			return pgtest.NewCluster(t, pgtest.ExtensionFiles(pgtest.RealPgmq(t))).NewDB(t)
		},
		"pgflow-wasm layer": func(t *testing.T) *pgtest.DB {
			return pgtest.NewDB(t, pgtest.Layer(schema.LayerSchema))
		},
	}
	for name, newDB := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			ctx := context.Background()
			if _, err := db.Pool.Exec(ctx, `select pgflow.create_flow('n', 3, 1, 60)`); err != nil {
				t.Fatal(err)
			}
			how, err := poller.EnableInsertNotify(ctx, db.Pool, "n")
			if err != nil {
				t.Fatal(err)
			}
			wantOurs := name == "real pgmq 1.5.1"
			if ours := how != "pgmq.enable_notify_insert"; ours != wantOurs {
				t.Fatalf("notify set up by %q", how)
			}
			// Twice is harmless (workers start together).
			if _, err := poller.EnableInsertNotify(ctx, db.Pool, "n"); err != nil {
				t.Fatal(err)
			}
			listener := db.Conn(t)
			if _, err := listener.Exec(ctx, "listen "+pgx.Identifier{schema.InsertChannel("n")}.Sanitize()); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool.Exec(ctx, `select pgmq.send_batch('n', array['{"a":1}'::jsonb, '{"a":2}'::jsonb])`); err != nil {
				t.Fatal(err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := listener.WaitForNotification(waitCtx); err != nil {
				t.Fatalf("no notification after an insert: %v", err)
			}
			// One statement, one notification.
			quiet, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel2()
			if n, err := listener.WaitForNotification(quiet); err == nil {
				t.Fatalf("a second notification for one insert: %+v", n)
			}
		})
	}
}
