package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo"
	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/testbin"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
	"github.com/pgflow-wasm/pgflow-wasm/schema/pgflowsql"
)

// cliMu serializes in-process runs: urfave/cli v2 writes package-level state (its global
// help flag) while parsing, so two apps may not run at once.
var cliMu sync.Mutex

// runCLI runs the app in-process and returns what it printed and its error (with the exit
// code the binary would use).
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cliMu.Lock()
	defer cliMu.Unlock()
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {}                         // return the error instead of exiting
	err := app.Run(flagsFirst(app, append([]string{"pgflow-wasm"}, args...))) // as main does
	return out.String(), err
}

func migrationsFlag(t *testing.T) string {
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return "--migrations=" + filepath.Join(root, schema.DefaultMigrationsDir)
}

func TestDBInstallAndStatus(t *testing.T) {
	t.Parallel()
	pgtest.SkipWhereRealPgmq(t)
	url := pgtest.NewDB(t, pgtest.Empty()).URL
	out, err := runCLI(t, "db", "install", "--database-url", url, migrationsFlag(t))
	if err != nil {
		t.Fatalf("db install: %v\n%s", err, out)
	}
	for _, want := range []string{
		// An extension on the dev cluster (its folder is ours), a plain schema elsewhere.
		"pgmq:          installed pgmq " + schema.LayerVersion + " (pgflow-wasm layer, " + map[bool]string{false: "extension)", true: "schema)"}[pgtest.External(t)],
		"realtime.send: installed realtime.send (pgflow-wasm's",
		"migrations:    12 applied, 0 already applied (pgflow 0.8.1)",
		"+ 20250429164909_pgflow_initial.sql",
		"runs index:    created pgflow." + schema.RunsIndex,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("db install output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "db", "install", "--database-url", url, migrationsFlag(t))
	if err != nil || !strings.Contains(out, "migrations:    0 applied, 12 already applied") || !strings.Contains(out, "pgmq:          kept") ||
		!strings.Contains(out, "runs index:    kept pgflow."+schema.RunsIndex) {
		t.Fatalf("second db install: %v\n%s", err, out)
	}
	out, err = runCLI(t, "db", "status", "--database-url", url, migrationsFlag(t))
	if err != nil {
		t.Fatalf("db status after install: %v\n%s", err, out)
	}
	for _, want := range []string{
		"pgmq:          pgmq " + schema.LayerVersion + " (pgflow-wasm layer, extension)",
		"realtime.send: realtime.send (pgflow-wasm's, version " + schema.RealtimeVersion,
		"pgflow:        0.8.1 (12 migrations applied by pgflow-wasm, 0 pending)",
		"protocol:      0.8, detected from the catalogue (pgflow-wasm speaks it)",
		"runs index:    pgflow." + schema.RunsIndex + " present",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("db status output lacks %q:\n%s", want, out)
		}
	}
}

// An index that another pgflow-wasm process is building is left to it, and the output says
// what that means and what to do; the next install builds what is still missing.
func TestDBInstallSaysWhatABusyIndexBuildMeans(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, "DROP INDEX pgflow."+schema.InputIndex); err != nil {
		t.Fatal(err)
	}
	other := db.Conn(t) // the other process, in the middle of a build
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, schema.LockKeyIndexBuild); err != nil {
		t.Fatal(err)
	}
	// --migrations from the environment, or the pinned release: the one the database has.
	out, err := runCLI(t, "db", "install", "--database-url", db.URL)
	want := "input index:   busy pgflow." + schema.InputIndex + " (the dashboard's search by input field): left to another pgflow-wasm process"
	if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "runs index:    kept pgflow."+schema.RunsIndex+" (the dashboard's runs page, newest first)\n") {
		t.Fatalf("db install while another process builds an index: %v, want %q:\n%s", err, want, out)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, schema.LockKeyIndexBuild); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "db", "install", "--database-url", db.URL); err != nil || !strings.Contains(out, "input index:   created pgflow."+schema.InputIndex) {
		t.Fatalf("db install once the other build is done: %v\n%s", err, out)
	}
}

func TestDBInstallAsPlainSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t, pgtest.Empty()).URL
	out, err := runCLI(t, "db", "install", "--database-url", url, migrationsFlag(t), "--pgmq", "schema")
	if err != nil || !strings.Contains(out, "(pgflow-wasm layer, schema)") {
		t.Fatalf("db install --pgmq schema: %v\n%s", err, out)
	}
	out, _ = runCLI(t, "db", "status", "--database-url", url, migrationsFlag(t))
	if !strings.Contains(out, "its CREATE EXTENSION pgmq was skipped") {
		t.Fatalf("db status does not say the first migration's CREATE EXTENSION was skipped:\n%s", out)
	}
	if strings.Contains(out, "updates it in place") {
		t.Fatalf("db status offers to update the current layer:\n%s", out)
	}
	// A layer that reports an older version: status says that db install updates it.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `CREATE OR REPLACE FUNCTION pgmq.pgflow_wasm_layer() RETURNS text
		LANGUAGE sql IMMUTABLE AS $$ SELECT '1.5.0+pgflow-wasm.1'::text $$`); err != nil {
		t.Fatal(err)
	}
	out, _ = runCLI(t, "db", "status", "--database-url", url, migrationsFlag(t))
	if want := "this pgflow-wasm ships layer " + schema.LayerVersion + ": `pgflow-wasm db install` updates it in place"; !strings.Contains(out, want) {
		t.Fatalf("db status on an older layer lacks %q:\n%s", want, out)
	}
}

func exitCodeOf(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	return -1
}

func TestDBStatusOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t, pgtest.Empty()).URL
	out, err := runCLI(t, "db", "status", "--database-url", url, migrationsFlag(t))
	want := "not installed: pgmq is not installed; realtime.send is missing; no pgflow migration is applied; " +
		"12 pgflow migration(s) not applied yet; run `pgflow-wasm db install`"
	if err == nil || err.Error() != want || exitCodeOf(err) != 1 {
		t.Fatalf("db status on an empty database: %v (exit %d)\nwant: %s", err, exitCodeOf(err), want)
	}
	if !strings.Contains(out, "pgmq:          pgmq missing") || !strings.Contains(out, "pgflow:        not installed") ||
		!strings.Contains(out, "pgflow-wasm:   "+buildinfo.Get().Version+" (commit ") {
		t.Fatalf("output:\n%s", out)
	}
}

// --version names the build: version, commit, engines, the embedded pgflow SQL.
func TestVersionNamesTheBuild(t *testing.T) {
	out, err := runCLI(t, "--version")
	bi := buildinfo.Get()
	if err != nil || !strings.HasPrefix(out, "pgflow-wasm "+bi.Version+"\n") ||
		!strings.Contains(out, "engines:    "+strings.Join(bi.Engines, ", ")) || !strings.Contains(out, "pgflow SQL: ") {
		t.Errorf("--version: %v\n%s", err, out)
	}
}

func TestDBCommandsOnBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"db", "status", "--database-url", "postgres://nobody@127.0.0.1:1/db"},
			"cannot connect to PostgreSQL at 127.0.0.1:1 (is the server running?): dial tcp 127.0.0.1:1: connect: connection refused"},
		{[]string{"db", "install", "--database-url", "postgres://u@h:notaport/db"}, "invalid database URL"},
		{[]string{"db", "install", "--database-url", "", "--migrations", "/nope"}, "no database URL: pass --database-url or set DATABASE_URL"},
		{[]string{"db", "install", "--pgmq", "sometimes"}, `unknown pgmq mode "sometimes": use auto, extension or schema`},
	} {
		_, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCodeOf(err) == 0 {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	url := pgtest.NewDB(t, pgtest.Empty()).URL
	_, err := runCLI(t, "db", "install", "--database-url", url, "--migrations", "/nonexistent/migrations")
	if err == nil || !strings.Contains(err.Error(), "pgflow migrations folder /nonexistent/migrations not found") ||
		!strings.Contains(err.Error(), "leave it out to install the pgflow built into this binary") {
		t.Fatalf("db install with a missing migrations folder: %v", err)
	}
}

func TestLocalDBUpPrintsAWorkingURL(t *testing.T) {
	t.Parallel()
	out, err := runCLI(t, "localdb", "up")
	if err != nil {
		t.Fatalf("localdb up: %v\n%s", err, out)
	}
	url := strings.TrimSpace(out)
	if !regexp.MustCompile(`^postgres://postgres@127\.0\.0\.1:\d+/pgflow\?sslmode=disable$`).MatchString(url) {
		t.Fatalf("localdb up printed %q", out)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("the printed URL does not connect: %v", err)
	}
	conn.Close(context.Background())
	again, err := runCLI(t, "localdb", "url")
	if err != nil || strings.TrimSpace(again) != url {
		t.Fatalf("localdb url = %q (%v), want %q", again, err, url)
	}
	status, err := runCLI(t, "localdb", "status")
	if err != nil || !strings.Contains(status, "state:      running") || !strings.Contains(status, "fsync:") {
		t.Fatalf("localdb status: %v\n%s", err, status)
	}
}

// The binary alone, in an empty folder: db install has pgflow's SQL built in.
func TestDBInstallFromAnEmptyFolderWithOnlyTheBinary(t *testing.T) {
	t.Parallel()
	if _, _, ok := pgflowsql.Migrations(); !ok {
		t.Skip("this build has no pgflow SQL built in: `make` copies it from npm before building")
	}
	dir := t.TempDir()
	built, err := testbin.Path() // built once per test process (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "pgflow-wasm")
	if err := os.Link(built, bin); err != nil { // the binary alone in dir
		t.Fatal(err)
	}
	url := pgtest.NewDB(t, pgtest.Empty()).URL
	cmd := exec.Command(bin, "db", "install", "--database-url", url)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), schema.MigrationsDirEnv+"=") // nothing but what the binary carries
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "migrations:    12 applied, 0 already applied (pgflow 0.8.1)") {
		t.Fatalf("db install in an empty folder: %v\n%s", err, out)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("db install left files in its folder: %v", entries)
	}
}

// While a flow is being written: compile --dry-run says what would change and changes
// nothing; flow drop frees a slug, refusing while runs are in progress unless --force.
func TestCompileDryRunAndFlowDrop(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	echo := filepath.Join(repoRootDir(t), "modules/testdata/echo.wasm")
	flows := filepath.Join(t.TempDir(), "flows.yaml")
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(flows, []byte(fmt.Sprintf(yaml, echo)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("flows:\n  - slug: draft\n    steps:\n      - {slug: a, module: %q}\n")
	out, err := runCLI(t, "compile", "--flows", flows, "--database-url", db.URL, "--dry-run")
	if err != nil || !strings.Contains(out, "draft: would be created") || !strings.Contains(out, "dry run: nothing was written") {
		t.Fatalf("compile --dry-run: %v\n%s", err, out)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.flows where flow_slug = 'draft'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a dry run created the flow (%d, %v)", n, err)
	}
	if out, err = runCLI(t, "compile", "--flows", flows, "--database-url", db.URL); err != nil || !strings.Contains(out, "draft: created") {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	// A new step: a changed shape, refused; the dry run says so too.
	write("flows:\n  - slug: draft\n    steps:\n      - {slug: a, module: %[1]q}\n      - {slug: b, depends_on: [a], module: %[1]q}\n")
	if _, err = runCLI(t, "compile", "--flows", flows, "--database-url", db.URL, "--dry-run"); err == nil ||
		!strings.Contains(err.Error(), `step "b" is in the file but not in the database`) {
		t.Fatalf("compile --dry-run of a changed shape: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `select pgflow.start_flow('draft', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err = runCLI(t, "flow", "drop", "draft", "--database-url", db.URL); err == nil || !strings.Contains(err.Error(), "1 runs in progress") {
		t.Fatalf("flow drop with a run in progress: %v", err)
	}
	out, err = runCLI(t, "flow", "drop", "draft", "--database-url", db.URL, "--force")
	if err != nil || !strings.Contains(out, "dropped flow draft: 1 runs deleted") {
		t.Fatalf("flow drop --force: %v\n%s", err, out)
	}
	if out, err = runCLI(t, "compile", "--flows", flows, "--database-url", db.URL); err != nil || !strings.Contains(out, "draft: created") {
		t.Fatalf("compile after the drop: %v\n%s", err, out)
	}
	if _, err = runCLI(t, "flow", "drop", "nowhere", "--database-url", db.URL); err == nil || !strings.Contains(err.Error(), `no flow "nowhere"`) {
		t.Fatalf("flow drop of a flow that does not exist: %v", err)
	}
}

func repoRootDir(t *testing.T) string {
	t.Helper()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}
