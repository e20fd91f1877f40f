package localpg_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

func query(t *testing.T, url, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func exec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestStopStartRestartKeepDataAndPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgtest.NewCluster(t)
	url := c.URL("postgres")
	exec(t, url, `CREATE TABLE kept AS SELECT 42 AS answer`)
	port := c.Port()

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Running(ctx) {
		t.Fatal("running after Stop")
	}
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a stopped cluster")
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stopping a stopped cluster: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port() != port {
		t.Fatalf("port changed from %d to %d across a restart", port, c.Port())
	}
	if got := query(t, url, `SELECT answer::text FROM kept`); got != "42" {
		t.Fatalf("data after restart: %s", got)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := query(t, url, `SELECT answer::text FROM kept`); got != "42" {
		t.Fatalf("data after Restart: %s", got)
	}
}

func TestSettingsAndALTERSYSTEMWins(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	url := c.URL("postgres")
	if got := query(t, url, `SHOW max_connections`); got != "300" {
		t.Fatalf("max_connections %s, want 300", got)
	}
	if got := query(t, url, `SHOW fsync`); got != "off" {
		t.Fatalf("fsync %s, want off", got)
	}
	if got := query(t, url, `SHOW listen_addresses`); got != "127.0.0.1" {
		t.Fatalf("listen_addresses %s", got)
	}
	// A benchmark turns fsync on this way: our settings file must not prevent it.
	exec(t, url, `ALTER SYSTEM SET fsync = on`)
	query(t, url, `SELECT pg_reload_conf()::text`)
	deadline := time.Now().Add(5 * time.Second)
	for query(t, url, `SHOW fsync`) != "on" {
		if time.Now().After(deadline) {
			t.Fatal("ALTER SYSTEM SET fsync = on + reload did not take effect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := query(t, url, `SHOW fsync`); got != "on" {
		t.Fatalf("after restart fsync is %s: ALTER SYSTEM must survive our settings file", got)
	}
}

func TestConcurrentStartsShareOneServer(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "pgflow-wasm-localpg-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	first, err := localpg.New(localpg.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Remove(context.Background()) })
	var wg sync.WaitGroup
	clusters := make([]*localpg.Cluster, 4)
	errs := make([]error, 4)
	for i := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := localpg.New(localpg.Config{Dir: dir})
			if err == nil {
				err = c.Start(context.Background())
			}
			clusters[i], errs[i] = c, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if clusters[i].Port() != clusters[0].Port() {
			t.Fatalf("two starts of one folder use ports %d and %d", clusters[0].Port(), clusters[i].Port())
		}
	}
	pid := query(t, clusters[0].URL("postgres"), `SELECT pg_backend_pid()::text`)
	if pid == "" {
		t.Fatal("no server")
	}
	again, err := localpg.New(localpg.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if again.Port() != clusters[0].Port() {
		t.Fatalf("the port stored in the folder was not reused: %d vs %d", again.Port(), clusters[0].Port())
	}
}

func TestUnreachableFolderFallsBackUnderTmp(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root hands the cluster to the postgres user, whose reach this checks")
	}
	closed, err := os.MkdirTemp("", "pgflow-wasm-closed-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(closed)
	os.Chmod(closed, 0o700) // like /root: the postgres user cannot pass
	c, err := localpg.New(localpg.Config{Dir: filepath.Join(closed, "checkout", ".pgdata")})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(c.Dir)
	if c.Relocated == "" || !strings.HasPrefix(c.Dir, os.TempDir()) || strings.HasPrefix(c.Dir, closed) {
		t.Fatalf("cluster in %s (relocated: %q), want a folder under %s", c.Dir, c.Relocated, os.TempDir())
	}
	if !strings.Contains(c.Relocated, "not reachable by user postgres") {
		t.Fatalf("relocation reason: %q", c.Relocated)
	}
	same, err := localpg.New(localpg.Config{Dir: filepath.Join(closed, "checkout", ".pgdata")})
	if err != nil {
		t.Fatal(err)
	}
	if same.Dir != c.Dir {
		t.Fatalf("the fallback folder is not stable: %s then %s", c.Dir, same.Dir)
	}
}

func TestPortsDifferPerFolder(t *testing.T) {
	t.Parallel()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("RepoRoot gave %s: %v", root, err)
	}
	a, b := t.TempDir(), t.TempDir()
	ca, err := localpg.New(localpg.Config{Dir: filepath.Join(a, "one")})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := localpg.New(localpg.Config{Dir: filepath.Join(b, "two")})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ca.Dir)
	defer os.RemoveAll(cb.Dir)
	if ca.Port() == cb.Port() {
		t.Fatalf("two folders derived the same port %d", ca.Port())
	}
	if ca.Port() < 15433 || ca.Port() >= 25433 {
		t.Fatalf("derived port %d outside 15433-25432", ca.Port())
	}
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	dir, err := localpg.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"postgres", "initdb", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s lacks %s", dir, b)
		}
	}
}
