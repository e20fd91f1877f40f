package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Cluster is a private PostgreSQL server for one test: its own folder and port, stopped
// and deleted when the test ends. Start, Stop and Restart take a context (localpg.Cluster).
type Cluster struct {
	*localpg.Cluster
	t testing.TB
}

type clusterOptions struct {
	extensionFiles map[string][]byte
	notOwned       bool
	settings       map[string]string
}

// Settings adds server settings (postgresql.conf lines) to the cluster's.
func Settings(settings map[string]string) ClusterOption {
	return func(o *clusterOptions) { o.settings = settings }
}

// ClusterOption configures NewCluster.
type ClusterOption func(*clusterOptions)

// ExtensionFiles puts files into the cluster's private extension folder (fixture extensions).
func ExtensionFiles(files map[string][]byte) ClusterOption {
	return func(o *clusterOptions) { o.extensionFiles = files }
}

// NotOwned makes the cluster stand in for a server this project did not create: its
// extension folder lacks the marker that lets `db install` write there.
func NotOwned() ClusterOption {
	return func(o *clusterOptions) { o.notOwned = true }
}

// NewCluster initializes and starts a private cluster (about a second: initdb).
func NewCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	var o clusterOptions
	for _, opt := range opts {
		opt(&o)
	}
	// Not t.TempDir(): its parents are closed to the postgres user when we run as root.
	dir, err := os.MkdirTemp("", "pgflow-wasm-test-cluster-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	os.Chmod(dir, 0o755)
	c, err := localpg.New(localpg.Config{Dir: dir, ExtensionFiles: o.extensionFiles, NotOwned: o.notOwned, Settings: o.settings, Logf: t.Logf})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Remove(ctx); err != nil {
			t.Errorf("pgtest: removing cluster %s: %v", c.Dir, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return &Cluster{Cluster: c, t: t}
}

// NewDB creates a database in the private cluster, installed directly (no template: a
// private cluster serves one test), and drops it when the test ends. Options as NewDB's.
func (c *Cluster) NewDB(t testing.TB, opts ...Option) *DB {
	t.Helper()
	o := options{layer: schema.LayerAuto}
	for _, opt := range opts {
		opt(&o)
	}
	var err error
	if o.modes, err = planModes(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s := &server{adminURL: c.URL("postgres")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer admin.Close(context.Background())
	name := dbName(t.Name())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	db := &DB{Name: name, URL: s.dbURL(name)}
	t.Cleanup(func() {
		if db.Pool != nil {
			db.Pool.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if conn, err := pgx.Connect(ctx, s.adminURL); err == nil { // the cluster may be stopped by now
			conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	if !o.empty {
		root, err := localpg.RepoRoot(".")
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		migrations := os.Getenv(schema.MigrationsDirEnv)
		if migrations == "" {
			migrations = root + "/" + schema.DefaultMigrationsDir
		}
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		_, err = schema.Install(ctx, conn, schema.Options{MigrationsDir: migrations, Layer: o.layer})
		if err == nil {
			err = prepare(ctx, conn, o.modes)
		}
		conn.Close(context.Background())
		if err != nil {
			t.Fatalf("pgtest: installing into %s: %v", name, err)
		}
		auditAtEnd(t, db)
	}
	if err := applyPlanSettings(ctx, admin, name, o.modes); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if db.Pool, err = pgxPool(ctx, db.URL); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return db
}

// RealPgmqEnv names the folder of the real pgmq extension's files; by default the test data
// beside this repository, ../shared/pgmq/1.5.1 (never copied into it).
const RealPgmqEnv = "PGTEST_REAL_PGMQ"

// RealPgmq returns the real pgmq's extension files (for ExtensionFiles), skipping the test
// with where they come from when they are absent.
func RealPgmq(t testing.TB) map[string][]byte {
	t.Helper()
	dir := os.Getenv(RealPgmqEnv)
	if dir == "" {
		root, err := localpg.RepoRoot(".")
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		dir = filepath.Join(root, "..", "shared", "pgmq", "1.5.1")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("the real pgmq is not here (%v): put its pgmq.control and pgmq--*.sql in ../shared/pgmq/1.5.1 or set %s", err, RealPgmqEnv)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, "pgmq") && (strings.HasSuffix(n, ".control") || strings.HasSuffix(n, ".sql")) {
			if files[n], err = os.ReadFile(filepath.Join(dir, n)); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
	}
	if files["pgmq.control"] == nil {
		t.Skipf("%s has no pgmq.control: the real pgmq's files are needed", dir)
	}
	return files
}

// Pgflow014Env names the folder of pgflow 0.14.1's migrations; by default the test data
// beside this repository, ../shared/pgflow/0.14.1/migrations (never copied into it).
const Pgflow014Env = "PGTEST_PGFLOW_014"

// Pgflow014 returns pgflow 0.14.1's migrations folder, skipping the test with where it comes
// from when it is absent.
func Pgflow014(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(Pgflow014Env)
	if dir == "" {
		root, err := localpg.RepoRoot(".")
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		dir = filepath.Join(root, "..", "shared", "pgflow", "0.14.1", "migrations")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("pgflow 0.14.1's migrations are not here (%v): they are test data in ../shared/pgflow/0.14.1/migrations (or set %s)", err, Pgflow014Env)
	}
	return dir
}

// PgflowMainEnv names the folder of pgflow's migrations at its main of 2026-10-01; by
// default the test data beside this repository, ../shared/pgflow/main-20261001/migrations.
const PgflowMainEnv = "PGTEST_PGFLOW_MAIN"

// PgflowMain returns the folder of pgflow's migrations at main of 2026-10-01 (0.17.0 and
// after), skipping the test with where it comes from when it is absent.
func PgflowMain(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(PgflowMainEnv)
	if dir == "" {
		root, err := localpg.RepoRoot(".")
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		dir = filepath.Join(root, "..", "shared", "pgflow", "main-20261001", "migrations")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("pgflow main's migrations are not here (%v): they are test data in ../shared/pgflow/main-20261001/migrations (or set %s)", err, PgflowMainEnv)
	}
	return dir
}

// PgflowRelease returns a folder with the first n migrations of pgflow 0.14.1: the release
// they make up (12: 0.8.1, 16: 0.12.0, 20: 0.14.1; see schema.releaseByLastMigration).
func PgflowRelease(t testing.TB, n int) string {
	t.Helper()
	return firstMigrations(t, Pgflow014(t), n)
}

// PgflowMainRelease is PgflowRelease over pgflow's main of 2026-10-01: 21 is 0.15.0, 22
// 0.15.1, 23 0.16.0, 24 0.17.0, 27 main.
func PgflowMainRelease(t testing.TB, n int) string {
	t.Helper()
	return firstMigrations(t, PgflowMain(t), n)
}

// firstMigrations copies the first n migrations of src into a folder of the test's own.
func firstMigrations(t testing.TB, src string, n int) string {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dst := t.TempDir()
	copied := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") || copied == n {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
		}
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		copied++
	}
	return dst
}

// NewStandby starts a streaming standby of primary (a base backup of it, kept in sync), a
// private cluster of its own removed when the test ends; Promote makes it the primary.
func NewStandby(t testing.TB, primary *Cluster) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgflow-wasm-test-standby-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	os.Chmod(dir, 0o755)
	c, err := localpg.New(localpg.Config{Dir: dir, Logf: t.Logf})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Remove(ctx); err != nil {
			t.Errorf("pgtest: removing standby %s: %v", c.Dir, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.CloneAsStandby(ctx, primary.Cluster); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return &Cluster{Cluster: c, t: t}
}
