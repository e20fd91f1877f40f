package pgflowwasm_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// outsideProgram is a Go program of someone else's: it embeds a Client, serves its
// dashboard on /ops/ of its own http.Server, starts a run inside its own transaction,
// waits for it, reads the run's dashboard page through its server, and stops.
const outsideProgram = `package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "outside:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	flows, err := flowfile.Parse("orders.yaml", ".", []byte(` + "`" + `
flows:
  - slug: welcome
    steps:
      - {slug: hello, module: ` + "`" + `+os.Getenv("GREET_MODULE")+` + "`" + `}
` + "`" + `))
	if err != nil {
		return err
	}
	client, err := pgflowwasm.NewClient(pool, pgflowwasm.Config{Flows: flows, Signal: pgflowtype.SignalNotify})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	dash, err := client.DashboardHandler(pgflowwasm.DashboardOptions{BasePath: "/ops"})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", dash)
	mux.Handle("/health/", http.StripPrefix("/health", client.HealthHandler()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)

	// The order and the run that welcomes its customer commit together.
	var id string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "create table orders (customer text)"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "insert into orders values ('Ada')"); err != nil {
			return err
		}
		id, err = client.StartRunTx(ctx, tx, "welcome", map[string]string{"name": "Ada"})
		return err
	})
	if err != nil {
		return err
	}
	r, err := client.WaitRun(ctx, id)
	if err != nil {
		return err
	}
	fmt.Println("run", r.ID, r.Status, string(r.Output))

	resp, err := http.Get("http://" + ln.Addr().String() + "/ops/runs/" + id)
	if err != nil {
		return err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println("dashboard", resp.StatusCode, strings.Contains(string(page), id))

	if err := client.Stop(ctx); err != nil {
		return err
	}
	// Stop closed the dashboard; the program's server goes on until it shuts it down.
	resp, err = http.Get("http://" + ln.Addr().String() + "/ops/runs")
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Println("after stop", resp.StatusCode)
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	fmt.Println("stopped")
	return nil
}
`

// A Go program outside the repository imports the root package the way a user's would
// (a go.mod that requires it, pointed at this checkout), is built offline from the module
// cache, runs a flow with the dashboard mounted on /ops/ of its own server, starts a run in
// its own transaction, and stops cleanly.
func TestAProgramOutsideTheRepositoryEmbedsTheClient(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Join(root, "modules/examples/c/greet.wasm")
	if _, err := os.Stat(module); err != nil {
		t.Fatalf("%v: build the examples first (`make examples`)", err)
	}
	dir := t.TempDir()
	requires, err := moduleRequirements(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// The requirements are the repository's, as `go get` and `go mod tidy` write them into an
	// importer's go.mod: with them the build loads the module graph lazily, as the
	// repository's own does. With only the one require it must load every go.mod in the
	// graph, old ones included that nothing builds (esbuild's go 1.13 go.mod names a 2022
	// golang.org/x/sys), and offline on a fresh machine those are not in the cache.
	goMod := "module example.com/outside\n\ngo 1.26.0\n\nrequire github.com/pgflow-wasm/pgflow-wasm v0.0.0\n\n" +
		requires + "\n" +
		"replace github.com/pgflow-wasm/pgflow-wasm => " + root + "\n\n" +
		// The guest library is a module of its own, required at v0.0.0 and replaced by the
		// repository: an importer replaces it as well.
		"replace github.com/pgflow-wasm/pgflow-wasm/abi/go => " + filepath.Join(root, "abi/go") + "\n"
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": goMod, "go.sum": string(sums), "main.go": outsideProgram} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", "outside", ".")
	build.Dir = dir
	// Offline: everything comes from the module cache the repository's own build filled.
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOSUMDB=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the outside program: %v\n%s", err, out)
	}
	// The browser tests' chromedp stays in their own module: no importer inherits it, neither
	// in its go.mod (the repository's requirements) nor in its binary.
	if strings.Contains(requires, "chromedp") {
		t.Errorf("an importer of pgflow-wasm requires chromedp:\n%s", requires)
	}
	version := exec.CommandContext(ctx, "go", "version", "-m", filepath.Join(dir, "outside"))
	version.Env = build.Env
	modules, err := version.CombinedOutput()
	if err != nil || !strings.Contains(string(modules), "github.com/jackc/pgx/v5") {
		t.Fatalf("go version -m: %v\n%s", err, modules)
	}
	if strings.Contains(string(modules), "chromedp") {
		t.Errorf("the outside program carries chromedp:\n%s", modules)
	}

	db := pgtest.NewDB(t)
	prog := exec.CommandContext(ctx, filepath.Join(dir, "outside"))
	prog.Dir = dir
	prog.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "GREET_MODULE="+module)
	out, err := prog.CombinedOutput()
	if err != nil {
		t.Fatalf("the outside program: %v\n%s", err, out)
	}
	text := string(out)
	var id string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "run" {
			id = f[1]
			if f[2] != "completed" || !strings.Contains(line, `"Hello, Ada!"`) {
				t.Errorf("the run: %q", line)
			}
		}
	}
	if id == "" || !strings.Contains(text, "dashboard 200 true\n") || !strings.Contains(text, "after stop 503\n") || !strings.HasSuffix(text, "stopped\n") {
		t.Fatalf("the outside program said:\n%s", text)
	}
	var customers int
	if err := db.Pool.QueryRow(ctx, `select count(*) from orders`).Scan(&customers); err != nil || customers != 1 {
		t.Errorf("the order committed with its run: %d rows, %v", customers, err)
	}
	proto, err := schema.DetectPgflow(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if proto.StoppedAt { // pgflow 0.10+: Stop marks the worker's rows stopped
		var running int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.workers where queue_name = 'welcome' and stopped_at is null`).
			Scan(&running); err != nil || running != 0 {
			t.Errorf("worker rows not marked stopped: %d, %v", running, err)
		}
	}
}

// moduleRequirements returns the require blocks of a go.mod, as written.
func moduleRequirements(goMod string) (string, error) {
	text, err := os.ReadFile(goMod)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	inBlock := false
	for line := range strings.Lines(string(text)) {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "require (":
			inBlock = true
			out.WriteString(line)
		case inBlock:
			out.WriteString(line)
			inBlock = trimmed != ")"
		case strings.HasPrefix(trimmed, "require "):
			out.WriteString(line)
		}
	}
	if out.Len() == 0 {
		return "", fmt.Errorf("%s has no require", goMod)
	}
	return out.String(), nil
}
