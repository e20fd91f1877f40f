package schema_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

func migrationsDir(t *testing.T) string { return migrationsDirTB(t) }

// loadMigrations reads migrationsDir's files (for Status's pending counts).
func loadMigrations(t *testing.T) *schema.Migrations {
	t.Helper()
	m, err := schema.LoadMigrations(migrationsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func migrationsDirTB(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(schema.MigrationsDirEnv); d != "" {
		return d
	}
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, schema.DefaultMigrationsDir)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := schema.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func install(t *testing.T, conn *pgx.Conn, opts schema.Options) schema.Report {
	t.Helper()
	if opts.MigrationsDir == "" {
		opts.MigrationsDir = migrationsDir(t)
	}
	rep, err := schema.Install(context.Background(), conn, opts)
	if err != nil {
		t.Fatalf("Install: %v", err)
	}
	return rep
}

// catalog lists what pgflow-wasm's install touches, with function bodies hashed and the
// migration rows' timestamps: equal catalogs mean nothing changed.
func catalog(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `
		WITH ns AS (SELECT oid, nspname FROM pg_namespace WHERE nspname IN ('pgmq', 'pgflow', 'realtime', 'pgflow_wasm'))
		SELECT string_agg(x, E'\n' ORDER BY x) FROM (
			SELECT 'rel ' || c.oid::regclass::text || ' ' || c.relkind::text FROM pg_class c JOIN ns ON ns.oid = c.relnamespace
			UNION ALL
			SELECT 'fn ' || p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
			FROM pg_proc p JOIN ns ON ns.oid = p.pronamespace WHERE p.prokind = 'f'
			UNION ALL
			SELECT 'ext ' || extname || ' ' || extversion FROM pg_extension
			UNION ALL
			SELECT 'mig ' || name || ' ' || sha256 || ' ' || applied_at::text FROM pgflow_wasm.schema_migrations
		) AS objects(x)`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInstallTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []schema.LayerMode{schema.LayerAuto, schema.LayerExtension, schema.LayerSchema} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			if mode != schema.LayerSchema {
				pgtest.SkipWhereRealPgmq(t)
			}
			conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
			first := install(t, conn, schema.Options{Layer: mode})
			// auto: an extension on the dev cluster (its folder is ours), a plain schema elsewhere.
			wantExt := mode == schema.LayerExtension || (mode == schema.LayerAuto && !pgtest.External(t))
			if first.Pgmq.Kind != schema.PgmqLayer || first.Pgmq.Extension != wantExt || first.PgmqAction != "installed" ||
				first.RealtimeAction != "installed" || len(first.Applied) != 12 || first.AlreadyApplied != 0 || first.PgflowVersion != "0.8.1" ||
				first.RunsIndex != schema.RunsIndexCreated {
				t.Fatalf("first install: %+v", first)
			}
			before := catalog(t, conn)
			second := install(t, conn, schema.Options{Layer: mode})
			if second.PgmqAction != "kept" || second.RealtimeAction != "kept" || len(second.Applied) != 0 || second.AlreadyApplied != 12 ||
				second.RunsIndex != schema.RunsIndexPresent {
				t.Fatalf("second install did something: %+v", second)
			}
			if after := catalog(t, conn); after != before {
				t.Fatalf("the second install changed the catalog:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			st, err := schema.Status(context.Background(), conn, loadMigrations(t))
			if err != nil {
				t.Fatal(err)
			}
			if !st.Installed() || st.PgflowVersion != "0.8.1" || len(st.Pending) != 0 {
				t.Fatalf("status after install: %v %+v", st.Problems(), st)
			}
			for i, m := range st.Migrations {
				// Only the first migration holds CREATE EXTENSION "pgmq"; only a plain schema skips it.
				if wantSkip := i == 0 && !wantExt; m.SkippedPgmq != wantSkip {
					t.Fatalf("%s: skipped CREATE EXTENSION = %v, want %v", m.Name, m.SkippedPgmq, wantSkip)
				}
			}
		})
	}
}

// A concurrent index build that is interrupted (here: cancelled while it waits for a writer's
// transaction) leaves an invalid index behind, which IF NOT EXISTS alone would keep for ever.
// The next EnsureRunsIndex builds it again; one that finds another process building it
// leaves it alone.
func TestAnInterruptedRunsIndexBuildIsRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	conn, writer := db.Conn(t), db.Conn(t)
	if _, err := conn.Exec(ctx, "DROP INDEX pgflow."+schema.RunsIndex); err != nil {
		t.Fatal(err)
	}
	// An open transaction that wrote to pgflow.runs: the build waits for it.
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE pgflow.runs SET remaining_steps = remaining_steps WHERE false`); err != nil {
		t.Fatal(err)
	}
	pid := conn.PgConn().PID()
	built := make(chan error, 1)
	go func() { _, err := schema.EnsureRunsIndex(ctx, conn); built <- err }()
	admin := db.Conn(t)
	waitForBuildToWait(t, admin, pid)
	if _, err := admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-built; err == nil || !strings.Contains(err.Error(), "canceling statement") {
		t.Fatalf("the cancelled build returned %v", err)
	}
	_ = tx.Rollback(ctx)
	if exists, valid, err := schema.RunsIndexValid(ctx, conn); err != nil || !exists || valid {
		t.Fatalf("after the interrupted build: exists %v, valid %v (%v); want an invalid index", exists, valid, err)
	}

	// Another pgflow-wasm process holds the build lock: left to it.
	other := db.Conn(t)
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, schema.LockKeyIndexBuild); err != nil {
		t.Fatal(err)
	}
	if state, err := schema.EnsureRunsIndex(ctx, conn); err != nil || state != schema.RunsIndexBusy {
		t.Fatalf("while another process builds it: %v (%v), want %s", state, err, schema.RunsIndexBusy)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, schema.LockKeyIndexBuild); err != nil {
		t.Fatal(err)
	}

	if state, err := schema.EnsureRunsIndex(ctx, conn); err != nil || state != schema.RunsIndexRebuilt {
		t.Fatalf("EnsureRunsIndex: %v (%v), want %s", state, err, schema.RunsIndexRebuilt)
	}
	if exists, valid, err := schema.RunsIndexValid(ctx, conn); err != nil || !exists || !valid {
		t.Fatalf("after the rebuild: exists %v, valid %v (%v)", exists, valid, err)
	}
	if state, err := schema.EnsureRunsIndex(ctx, conn); err != nil || state != schema.RunsIndexPresent {
		t.Fatalf("EnsureRunsIndex again: %v (%v), want %s", state, err, schema.RunsIndexPresent)
	}
}

func TestConcurrentInstallersApplyEachMigrationOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Empty())
	var wg sync.WaitGroup
	reports := make([]schema.Report, 4)
	errs := make([]error, 4)
	for i := range reports {
		conn := connect(t, db.URL)
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], errs[i] = schema.Install(context.Background(), conn, schema.Options{MigrationsDir: migrationsDir(t)})
		}()
	}
	wg.Wait()
	applied := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("installer %d: %v", i, err)
		}
		applied += len(reports[i].Applied)
	}
	if applied != 12 {
		t.Fatalf("four concurrent installers applied %d migrations in all, want 12", applied)
	}
}

// copyMigrations copies the pinned migrations into a temp folder, keeping the first n.
func copyMigrations(t *testing.T, n int) string {
	t.Helper()
	src := migrationsDir(t)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	for i, e := range entries {
		if i >= n {
			break
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestInstallRefusesAChangedMigration(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDB(t).URL)
	dir := copyMigrations(t, 12)
	entries, _ := os.ReadDir(dir)
	edited := entries[2].Name()
	f, err := os.OpenFile(filepath.Join(dir, edited), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\n-- edited after it was applied\n")
	f.Close()
	_, err = schema.Install(context.Background(), conn, schema.Options{MigrationsDir: dir})
	if err == nil || !strings.Contains(err.Error(), edited) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("Install with an edited applied migration: %v; want an error naming %s and its sha256", err, edited)
	}
}

func TestInstallRefusesAnOlderMigrationsFolder(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDB(t).URL)
	_, err := schema.Install(context.Background(), conn, schema.Options{MigrationsDir: copyMigrations(t, 11)})
	if err == nil || !strings.Contains(err.Error(), "20251104080523_pgflow_upgrade_pgmq_1_5_1.sql") {
		t.Fatalf("Install from a folder missing an applied migration: %v", err)
	}
}

func TestInstallAppliesOnlyNewMigrations(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
	first := install(t, conn, schema.Options{MigrationsDir: copyMigrations(t, 10)})
	second := install(t, conn, schema.Options{})
	if len(first.Applied) != 10 || len(second.Applied) != 2 || second.AlreadyApplied != 10 {
		t.Fatalf("10 then 12 files: applied %d, then %d (+%d already)", len(first.Applied), len(second.Applied), second.AlreadyApplied)
	}
}

func TestInstallWithoutMigrationsFolder(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
	_, err := schema.Install(context.Background(), conn, schema.Options{MigrationsDir: filepath.Join(t.TempDir(), "nope")})
	var missing *schema.MissingMigrationsError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "give --migrations") || !strings.Contains(err.Error(), "built into this binary") {
		t.Fatalf("Install without migrations: %v", err)
	}
	st, err := schema.Status(context.Background(), conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pgmq.Kind != schema.PgmqMissing || st.Realtime.Kind != schema.RealtimeMissing {
		t.Fatalf("a failed install left things behind: %s, %s", st.Pgmq, st.Realtime)
	}
}

func TestInstallKeepsAForeignRealtimeSend(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Empty())
	conn := connect(t, db.URL)
	const foreign = `CREATE SCHEMA realtime;
		CREATE TABLE realtime.sent (event text);
		CREATE FUNCTION realtime.send(payload jsonb, event text, topic text, private boolean DEFAULT true)
		RETURNS void LANGUAGE sql AS $$ INSERT INTO realtime.sent VALUES (event) $$;`
	if _, err := conn.Exec(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	rep := install(t, conn, schema.Options{})
	if rep.Realtime.Kind != schema.RealtimeForeign || rep.RealtimeAction != "kept" {
		t.Fatalf("realtime: %s %s, want the foreign one kept", rep.RealtimeAction, rep.Realtime)
	}
	// pgflow calls the foreign function.
	if _, err := conn.Exec(context.Background(), `SELECT pgflow.create_flow('rt', 3, 1, 60); SELECT pgflow.add_step('rt', 'a');
		SELECT pgflow.start_flow('rt', '{}')`); err != nil {
		t.Fatal(err)
	}
	var n int
	conn.QueryRow(context.Background(), `SELECT count(*) FROM realtime.sent WHERE event = 'run:started'`).Scan(&n)
	if n != 1 {
		t.Fatalf("the kept realtime.send saw %d run:started events, want 1", n)
	}
}

func TestInstallWithoutPermissionSaysWhichPrivilege(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Empty())
	ctx := context.Background()
	role := "limited_" + strings.TrimPrefix(db.Name, "t_")
	if len(role) > 60 {
		role = role[:60]
	}
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Pool.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	})
	cfg, _ := pgx.ParseConfig(db.URL)
	cfg.User = role
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = schema.Install(ctx, conn, schema.Options{MigrationsDir: migrationsDir(t), Layer: schema.LayerSchema})
	conn.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "no permission") || !strings.Contains(err.Error(), "CREATE privilege on database") ||
		!strings.Contains(err.Error(), role) {
		t.Fatalf("Install as a role without CREATE: %v", err)
	}
}

func TestExactlyOnePgmqExtensionStatementIsSkipped(t *testing.T) {
	t.Parallel()
	m, err := schema.LoadMigrations(migrationsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	rewritten, err := m.WithoutPgmqExtension()
	if err != nil {
		t.Fatal(err)
	}
	first := m.Files[0]
	if len(rewritten) != 1 || rewritten[first.Name] == "" {
		t.Fatalf("rewrote %d files, want only %s", len(rewritten), first.Name)
	}
	if strings.Contains(strings.ToUpper(rewritten[first.Name]), `CREATE EXTENSION IF NOT EXISTS "PGMQ"`) ||
		len(first.SQL)-len(rewritten[first.Name]) > 100 {
		t.Fatal("the statement is still there, or more than it was removed")
	}
	dir := copyMigrations(t, 12)
	os.WriteFile(filepath.Join(dir, "99999999999999_extra.sql"), []byte("create extension if not exists pgmq;\n"), 0o644)
	m2, err := schema.LoadMigrations(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.WithoutPgmqExtension(); err == nil || !strings.Contains(err.Error(), "found 2") {
		t.Fatalf("two CREATE EXTENSION pgmq statements: %v", err)
	}
}

func TestOurExtensionFilesAreNotMistakenForARealPgmq(t *testing.T) {
	t.Parallel()
	pgtest.NewDB(t, pgtest.Layer(schema.LayerExtension)) // our files are in the extension folder now
	conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
	st, err := schema.Status(context.Background(), conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.PgmqAvailable.Version != schema.LayerVersion || !st.PgmqAvailable.Ours {
		t.Fatalf("available pgmq: %+v, want ours", st.PgmqAvailable)
	}
	rep := install(t, conn, schema.Options{})
	if rep.PgmqAction != "installed" || rep.Pgmq.Kind != schema.PgmqLayer {
		t.Fatalf("auto install with our files available: %s %s, want our layer installed", rep.PgmqAction, rep.Pgmq)
	}
	if got := rep.Pgmq.String(); got != "pgmq "+schema.LayerVersion+" (pgflow-wasm layer, extension)" {
		t.Fatalf("description %q", got)
	}
}

func TestStatusOfAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
	st, err := schema.Status(context.Background(), conn, loadMigrations(t))
	if err != nil {
		t.Fatal(err)
	}
	want := "pgmq is not installed; realtime.send is missing; no pgflow migration is applied; 12 pgflow migration(s) not applied yet"
	if got := strings.Join(st.Problems(), "; "); got != want || st.Installed() {
		t.Fatalf("problems %q, want %q", got, want)
	}
}

func TestAutoFallsBackToASchemaWhenTheServerIgnoresTheFolder(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	elsewhere := t.TempDir() // not the server's extension folder
	conn := connect(t, c.NewDB(t, pgtest.Empty()).URL)
	rep := install(t, conn, schema.Options{ExtensionDir: elsewhere})
	if rep.Pgmq.Kind != schema.PgmqLayer || rep.Pgmq.Extension || !strings.Contains(rep.PgmqNote, "does not read extension files") {
		t.Fatalf("install: %s (%s)", rep.Pgmq, rep.PgmqNote)
	}
	if left, _ := os.ReadDir(elsewhere); len(left) != 0 {
		t.Fatalf("files left in a folder the server ignores: %v", left)
	}
	conn2 := connect(t, c.NewDB(t, pgtest.Empty()).URL)
	_, err := schema.Install(context.Background(), conn2, schema.Options{MigrationsDir: migrationsDir(t), ExtensionDir: elsewhere, Layer: schema.LayerExtension})
	if err == nil || !strings.Contains(err.Error(), "does not read extension files") {
		t.Fatalf("forced extension mode where it cannot work: %v", err)
	}
	// The same cluster's own folder works.
	conn3 := connect(t, c.NewDB(t, pgtest.Empty()).URL)
	rep = install(t, conn3, schema.Options{})
	if !rep.Pgmq.Extension || rep.ExtensionDir != c.ExtensionDir() {
		t.Fatalf("install with the server's folder: %s in %q, want an extension in %s", rep.Pgmq, rep.ExtensionDir, c.ExtensionDir())
	}
	if _, err := os.Stat(filepath.Join(c.ExtensionDir(), fmt.Sprintf("pgmq--%s--%s.sql", schema.BaseLayerVersion, schema.LayerVersion))); err != nil {
		t.Fatal(err)
	}
}

// On a server pgflow-wasm did not create (the machine's own PostgreSQL, run as root), auto
// mode must not write into its extension folder: every cluster of the host reads it.
func TestAutoNeverWritesIntoAFolderItDoesNotOwn(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t, pgtest.NotOwned())
	before := listDir(t, c.ExtensionDir())
	rep := install(t, connect(t, c.NewDB(t, pgtest.Empty()).URL), schema.Options{})
	if rep.Pgmq.Kind != schema.PgmqLayer || rep.Pgmq.Extension || !strings.Contains(rep.PgmqNote, "not an extension folder pgflow-wasm created") {
		t.Fatalf("auto install: %s (%s), want our layer as a plain schema, saying why", rep.Pgmq, rep.PgmqNote)
	}
	if after := listDir(t, c.ExtensionDir()); after != before {
		t.Fatalf("auto install changed the extension folder:\nbefore %s\nafter  %s", before, after)
	}
	// Asked explicitly, it writes there and says where.
	rep = install(t, connect(t, c.NewDB(t, pgtest.Empty()).URL), schema.Options{Layer: schema.LayerExtension})
	if !rep.Pgmq.Extension || rep.ExtensionDir != c.ExtensionDir() {
		t.Fatalf("--pgmq extension: %s in %q, want an extension in %s", rep.Pgmq, rep.ExtensionDir, c.ExtensionDir())
	}
}

func listDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}
