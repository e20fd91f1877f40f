// Package pgtest gives tests real PostgreSQL databases: every test its own database,
// cloned from a template that holds pgmq, realtime.send and pgflow's migrations (built
// once per server and schema version, shared by every test process), dropped afterwards.
//
//	db := pgtest.NewDB(t)                                   // migrated, pgmq as auto-installed
//	db := pgtest.NewDB(t, pgtest.Layer(schema.LayerSchema)) // our pgmq layer as a plain schema
//	db := pgtest.NewDB(t, pgtest.Empty())                   // nothing installed
//	c := pgtest.NewCluster(t)                               // a private server to restart
//
// The server is $TEST_DATABASE_URL (its user must be allowed to create databases) or,
// without it, the checkout's dev cluster (<repo>/.pgdata), started on first use.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// DatabaseURLEnv names an outside server to use instead of the dev cluster.
const DatabaseURLEnv = "TEST_DATABASE_URL"

// KeepEnv, when set, keeps the databases of failed tests (their URL is logged).
const KeepEnv = "PGTEST_KEEP"

// DB is one test's database.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

// Conn opens a dedicated connection (for LISTEN, session settings, locks), closed when
// the test ends.
func (db *DB) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", db.Name, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

type options struct {
	layer schema.LayerMode
	empty bool
	// unaged: no warm flow whatever PlanEnv says (Unaged)
	unaged bool
	modes  []string // PlanEnv
}

// Option changes what NewDB installs.
type Option func(*options)

// Layer chooses how pgmq is installed (default schema.LayerAuto: on the dev cluster that is
// our layer as an extension). schema.LayerExtension skips the test on a server whose
// extension folder this process cannot write.
func Layer(mode schema.LayerMode) Option { return func(o *options) { o.layer = mode } }

// Empty gives a database with nothing installed (for installer tests).
func Empty() Option { return func(o *options) { o.empty = true } }

// Unaged gives a database without the warm flow even under PGTEST_PLAN=aged (its other plan
// settings still apply): for a test whose worker rightly touches every started task of a
// worker that is gone, as pgflow's own recovery rules do once a release that has them is
// installed, and the warm flow's tasks are such tasks.
func Unaged() Option { return func(o *options) { o.unaged = true } }

// NewDB creates a database for this test and drops it when the test ends.
func NewDB(t testing.TB, opts ...Option) *DB {
	t.Helper()
	o := options{layer: schema.LayerAuto}
	for _, opt := range opts {
		opt(&o)
	}
	srv, err := sharedServer()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if o.modes, err = planModes(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	template := ""
	if !o.empty {
		template, err = srv.template(o.layer, slices.Contains(o.modes, PlanAged) && !o.unaged)
		if err != nil {
			if skip, ok := err.(*skipError); ok {
				t.Skip(skip.reason)
			}
			t.Fatalf("pgtest: %v", err)
		}
	}
	return srv.create(t, template, o)
}

// server is the PostgreSQL instance tests use, with an admin pool on its maintenance database.
type server struct {
	adminURL   string
	admin      *pgxpool.Pool
	migrations string
	local      bool // the dev cluster: stale databases of dead test processes may be dropped

	mu        sync.Mutex
	templates map[templateKey]string
}

var (
	serverOnce sync.Once
	theServer  *server
	serverErr  error
)

func sharedServer() (*server, error) {
	serverOnce.Do(func() { theServer, serverErr = openServer() })
	return theServer, serverErr
}

func openServer() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		return nil, err
	}
	s := &server{templates: map[templateKey]string{}}
	s.migrations = os.Getenv(schema.MigrationsDirEnv)
	if s.migrations == "" {
		s.migrations = filepath.Join(root, schema.DefaultMigrationsDir)
	}
	if u := os.Getenv(DatabaseURLEnv); u != "" {
		s.adminURL = u
	} else {
		c, err := localpg.Dev(root, nil)
		if err != nil {
			return nil, fmt.Errorf("dev cluster: %w", err)
		}
		if err := c.Start(ctx); err != nil {
			return nil, fmt.Errorf("dev cluster: %w", err)
		}
		s.adminURL, s.local = c.URL("postgres"), true
	}
	cfg, err := pgxpool.ParseConfig(s.adminURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DatabaseURLEnv, err)
	}
	cfg.MaxConns = 4
	if s.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if err := s.admin.Ping(ctx); err != nil {
		return nil, schema.ExplainConnectError(cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.User, cfg.ConnConfig.Database, err)
	}
	if s.local {
		s.dropOrphans(ctx)
	}
	return s, nil
}

// dbURL is the admin URL pointed at another database.
func (s *server) dbURL(name string) string {
	u, err := url.Parse(s.adminURL)
	if err != nil || u.Scheme == "" {
		// key=value connection strings: append a dbname, the last one wins.
		return s.adminURL + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// dbName is "t_<pid>_<test name>_<random>", at most 63 bytes; the pid lets a later run
// drop databases left behind by a killed test process.
func dbName(testName string) string {
	var r [4]byte
	rand.Read(r[:])
	short := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	if len(short) > 36 {
		short = short[len(short)-36:]
	}
	return fmt.Sprintf("t_%d_%s_%s", os.Getpid(), short, hex.EncodeToString(r[:]))
}

func (s *server) create(t testing.TB, template string, o options) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := dbName(t.Name())
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := s.admin.Exec(ctx, stmt); err != nil {
		t.Fatalf("pgtest: %s: %v", stmt, err)
	}
	db := &DB{Name: name, URL: s.dbURL(name)}
	t.Cleanup(func() { s.drop(t, db) })
	if err := applyPlanSettings(ctx, s.admin, name, o.modes); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if !o.empty {
		auditAtEnd(t, db)
	}
	pool, err := pgxPool(ctx, db.URL)
	if err != nil {
		t.Fatalf("pgtest: pool for %s: %v", name, err)
	}
	db.Pool = pool
	return db
}

func (s *server) drop(t testing.TB, db *DB) {
	if db.Pool != nil {
		db.Pool.Close()
	}
	if t.Failed() && os.Getenv(KeepEnv) != "" {
		t.Logf("pgtest: kept database %s for inspection: %s", db.Name, db.URL)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: dropping %s: %v", db.Name, err)
	}
}

var orphanName = regexp.MustCompile(`^t_(\d+)_`)

// dropOrphans removes test databases whose process is gone (a killed `go test`).
func (s *server) dropOrphans(ctx context.Context) {
	rows, err := s.admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 't\_%'`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		m := orphanName.FindStringSubmatch(n)
		if m == nil || processAlive(m[1]) {
			continue
		}
		s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
	}
	s.dropOrphanRoles(ctx)
}

func processAlive(pid string) bool {
	_, err := os.Stat("/proc/" + pid)
	return err == nil
}

func pgxPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	return pgxpool.New(ctx, dbURL)
}

// External reports whether tests run on an outside server ($TEST_DATABASE_URL) rather than the
// checkout's dev cluster, whose extension folder pgflow-wasm owns.
func External(t testing.TB) bool {
	t.Helper()
	srv, err := sharedServer()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return !srv.local
}

// SkipWhereRealPgmq skips a test about pgflow-wasm's own pgmq layer on a server that offers
// a real pgmq: there auto mode (rightly) installs the real one.
func SkipWhereRealPgmq(t testing.TB) {
	t.Helper()
	srv, err := sharedServer()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	var real bool
	if err := srv.admin.QueryRow(context.Background(), `select exists (select 1 from pg_catalog.pg_available_extensions
		where name = 'pgmq' and coalesce(comment, '') not like $1 || '%')`, schema.LayerCommentPrefix).Scan(&real); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if real {
		t.Skip("the test server offers a real pgmq, which auto mode installs: this test is about pgflow-wasm's pgmq layer")
	}
}

// Protocol is the pgflow the database has (schema.DetectPgflow).
func (db *DB) Protocol(t testing.TB) schema.Protocol {
	t.Helper()
	p, err := schema.DetectPgflow(context.Background(), db.Pool)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return p
}

// StartTasks is the SQL call of pgflow.start_tasks this database takes for a flow's own
// queue, given SQL expressions of the flow slug, the message ids and the worker id: pgflow
// 0.17+ also takes the queue, named after the flow.
func (db *DB) StartTasks(t testing.TB, flow, msgIDs, worker string) string {
	t.Helper()
	if db.Protocol(t).QueueNames {
		return fmt.Sprintf("pgflow.start_tasks(%s, %s, %s, lower(%s))", flow, msgIDs, worker, flow)
	}
	return fmt.Sprintf("pgflow.start_tasks(%s, %s, %s)", flow, msgIDs, worker)
}
