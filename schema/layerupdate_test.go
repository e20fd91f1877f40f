package schema_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// installBaseLayer puts the layer's first version into schema pgmq, as a pgflow-wasm that
// shipped only it left databases.
func installBaseLayer(t testing.TB, db execer) {
	t.Helper()
	if _, err := db.Exec(context.Background(), "CREATE SCHEMA pgmq;\n"+schema.LayerBaseSQL()); err != nil {
		t.Fatalf("installing the first layer: %v", err)
	}
}

// installBaseExtension creates the layer's first version as an extension in conn's database
// of cluster c: an install into a database of its own writes every version's files into the
// cluster's folder first.
func installBaseExtension(t *testing.T, c *pgtest.Cluster, conn *pgx.Conn) {
	t.Helper()
	install(t, connect(t, c.NewDB(t, pgtest.Empty()).URL), schema.Options{Layer: schema.LayerExtension})
	mustExec(t, conn, `CREATE SCHEMA pgmq; CREATE EXTENSION pgmq WITH SCHEMA pgmq VERSION '`+schema.BaseLayerVersion+`'`)
}

// setDispatchCap makes the dispatchers name at most n queues from their next build on.
func setDispatchCap(t *testing.T, db execer, n int) {
	t.Helper()
	mustExec(t, db, fmt.Sprintf(`CREATE OR REPLACE FUNCTION pgmq._dispatch_cap() RETURNS integer
		LANGUAGE sql STABLE AS $$ SELECT %d $$`, n))
}

// dispatched tells whether pgmq.archive names queue in a branch of its own.
func dispatched(t *testing.T, conn interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, queue string) bool {
	t.Helper()
	var src string
	if err := conn.QueryRow(context.Background(), `SELECT prosrc FROM pg_proc WHERE oid = 'pgmq.archive(text, bigint[])'::regprocedure`).Scan(&src); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(src, "WHEN '"+queue+"' THEN")
}

// Updating a layer with messages in flight keeps every message where it was (visible or
// hidden, read counts and headers) and gives the existing queues static statements.
func TestTheLayerUpdatesInPlaceInBothForms(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	ctx := context.Background()
	forms := map[string]func(conn *pgx.Conn){
		"schema":    func(conn *pgx.Conn) { installBaseLayer(t, conn) },
		"extension": func(conn *pgx.Conn) { installBaseExtension(t, c, conn) },
	}
	for form, installFirst := range forms {
		t.Run(form, func(t *testing.T) {
			conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
			installFirst(conn)
			if _, err := conn.Exec(ctx, `
				SELECT pgmq.create('orders'); SELECT pgmq.create('Mixed_Case');
				SELECT pgmq.send_batch('orders', ARRAY['{"n":1}', '{"n":2}', '{"n":3}']::jsonb[]);
				SELECT pgmq.send('Mixed_Case', '{"m":1}', '{"h":"x"}'::jsonb);
				SELECT count(*) FROM pgmq.read('orders', 600, 1)`); err != nil {
				t.Fatal(err)
			}
			before := layerMessages(t, conn)

			rep := install(t, conn, schema.Options{})
			if rep.PgmqAction != "updated" || rep.Pgmq.Version != schema.LayerVersion || rep.Pgmq.Extension != (form == "extension") {
				t.Fatalf("install over layer %s: %s %s, want it updated in %s form", schema.BaseLayerVersion, rep.PgmqAction, rep.Pgmq, form)
			}
			if after := layerMessages(t, conn); after != before {
				t.Fatalf("messages changed by the update:\nbefore %s\nafter  %s", before, after)
			}
			for _, q := range []string{"orders", "Mixed_Case"} {
				if !dispatched(t, conn, q) {
					t.Errorf("queue %s has no static branch after the update", q)
				}
			}
			// The hidden message stays hidden; the others are read, archived, and sends go on.
			var read, archived, sent int
			if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgmq.read('orders', 30, 10)),
				(SELECT count(*) FROM pgmq.archive('orders', ARRAY[2, 3]::bigint[])),
				(SELECT count(*) FROM pgmq.send('Mixed_Case', '{"m":2}'))`).Scan(&read, &archived, &sent); err != nil {
				t.Fatal(err)
			}
			if read != 2 || archived != 2 || sent != 1 {
				t.Fatalf("after the update: read %d (want 2), archived %d (want 2), sent %d (want 1)", read, archived, sent)
			}
			if rep := install(t, conn, schema.Options{}); rep.PgmqAction != "kept" {
				t.Fatalf("second install: %s, want the updated layer kept", rep.PgmqAction)
			}
		})
	}
}

// layerMessages lists every message of every queue with what a reader can see of it.
func layerMessages(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `
		SELECT string_agg(format('%s:%s:%s:%s:%s:%s', q, msg_id, read_ct, vt > clock_timestamp(), message, headers), ' ' ORDER BY q, msg_id)
		FROM (SELECT 'orders' q, * FROM pgmq.q_orders UNION ALL SELECT 'Mixed_Case', * FROM pgmq.q_mixed_case) m`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Queues created and dropped at once from many sessions each get their branch, or lose it,
// and no build fails on another (one lock serializes them).
func TestConcurrentQueueChangesKeepTheDispatchersWhole(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Layer(schema.LayerSchema))
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for _, q := range []string{`SELECT pgmq.create('keep_' || $1::int)`, `SELECT pgmq.create('gone_' || $1::int)`,
				`SELECT pgmq.send('keep_' || $1::int, '{}')`, `SELECT pgmq.drop_queue('gone_' || $1::int)`} {
				if _, err := db.Pool.Exec(ctx, q, i); err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ {
		if keep, gone := "keep_"+string(rune('0'+i)), "gone_"+string(rune('0'+i)); !dispatched(t, db.Pool, keep) || dispatched(t, db.Pool, gone) {
			t.Errorf("%s dispatched %v (want true), %s dispatched %v (want false)", keep, dispatched(t, db.Pool, keep), gone, dispatched(t, db.Pool, gone))
		}
	}
}

// A role that may make queues but does not own the layer's functions cannot rebuild the
// dispatchers: its queue is made anyway, with a notice, and served by the fallback.
func TestAQueueOfARoleThatCannotRebuildIsServedByTheFallback(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Layer(schema.LayerSchema))
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var r [4]byte
	rand.Read(r[:])
	role := "pgmq_maker_" + hex.EncodeToString(r[:])
	for _, q := range []string{
		`CREATE ROLE ` + role,
		`GRANT USAGE, CREATE ON SCHEMA pgmq TO ` + role,
		`GRANT SELECT, INSERT ON pgmq.meta TO ` + role,
		`SET ROLE ` + role,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		c := connect(t, db.URL)
		c.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
	})
	if _, err := conn.Exec(ctx, `SELECT pgmq.create('by_maker')`); err != nil {
		t.Fatalf("creating a queue without owning the layer: %v", err)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "dispatchers not rebuilt") {
		t.Errorf("notices %q, want one saying the dispatchers were not rebuilt", notices)
	}
	if dispatched(t, conn, "by_maker") {
		t.Fatal("a role that owns nothing rebuilt the dispatchers")
	}
	var sent, read, archived int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgmq.send('by_maker', '{"a":1}')),
		(SELECT count(*) FROM pgmq.read('by_maker', 30, 5)),
		(SELECT count(*) FROM pgmq.archive('by_maker', ARRAY[1]::bigint[]))`).Scan(&sent, &read, &archived); err != nil {
		t.Fatal(err)
	}
	if sent != 1 || read != 1 || archived != 1 {
		t.Fatalf("the fallback sent %d, read %d, archived %d; want 1 each", sent, read, archived)
	}
}

// A layer whose dispatchers miss queues (a restored extension: its scripts ran before the
// queue list came back) gets them back from `db install`, which otherwise changes nothing.
func TestInstallRebuildsDispatchersThatMissQueues(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Layer(schema.LayerSchema))
	conn := connect(t, db.URL)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SELECT pgmq.create('restored')`); err != nil {
		t.Fatal(err)
	}
	setDispatchCap(t, conn, 0)
	if _, err := conn.Exec(ctx, `SELECT pgmq._build_dispatchers()`); err != nil {
		t.Fatal(err)
	}
	setDispatchCap(t, conn, 200)
	if dispatched(t, conn, "restored") {
		t.Fatal("the setup left the queue dispatched")
	}
	if rep := install(t, conn, schema.Options{}); rep.PgmqAction != "kept" {
		t.Fatalf("install: %s, want the layer kept", rep.PgmqAction)
	}
	if !dispatched(t, conn, "restored") {
		t.Fatal("install left a queue without its branch")
	}
	var before, after uint32
	conn.QueryRow(ctx, `SELECT xmin::text::bigint FROM pg_proc WHERE oid = 'pgmq.archive(text, bigint[])'::regprocedure`).Scan(&before)
	install(t, conn, schema.Options{})
	conn.QueryRow(ctx, `SELECT xmin::text::bigint FROM pg_proc WHERE oid = 'pgmq.archive(text, bigint[])'::regprocedure`).Scan(&after)
	if before == 0 || before != after {
		t.Fatalf("an install with nothing missing replaced the dispatchers (xmin %d -> %d)", before, after)
	}
}

// An update that cannot be made (here: the extension's update script cannot be written)
// keeps the first version, which works, says why, and lets the rest of the install go on.
func TestALayerThatCannotBeUpdatedIsKeptWithTheReason(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
	installBaseExtension(t, c, conn)
	rep := install(t, conn, schema.Options{ExtensionDir: filepath.Join(t.TempDir(), "missing")})
	if rep.PgmqAction != "kept" || rep.Pgmq.Version != schema.BaseLayerVersion ||
		!strings.Contains(rep.PgmqNote, "not updated to "+schema.LayerVersion) || !strings.Contains(rep.PgmqNote, "not writable") {
		t.Fatalf("install where the update cannot be written: %s %s (%s)", rep.PgmqAction, rep.Pgmq, rep.PgmqNote)
	}
	if len(rep.Applied) != 12 {
		t.Fatalf("the migrations after a layer kept: %d applied, want 12", len(rep.Applied))
	}
}
