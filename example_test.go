package pgflowwasm_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// Serve a flow whose steps are written in three languages, start a run and wait for it.
// The run output holds the leaf step's output.
func Example() {
	db, done := exampleDatabase() // any database where `pgflow-wasm db install` ran
	defer done()
	ctx := context.Background()

	root, _ := filepath.Abs(".")
	flows, err := flowfile.Parse("example", root, []byte(`
flows:
  - slug: words
    steps:
      - {slug: count, type: map, module: modules/examples/tinygo/word_count.wasm}
      - {slug: total, depends_on: [count], module: modules/examples/rust/sum.wasm}
      - {slug: check, depends_on: [total], module: modules/examples/c/sum.wasm}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := pgflowwasm.NewClient(db.Pool, pgflowwasm.Config{Flows: flows, Signal: pgflowtype.SignalNotify})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := client.Start(ctx); err != nil { // compiles the flow, then serves it
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx)

	// count (TinyGo) maps over the input; total (Rust) and check (C) add the numbers up.
	id, err := client.StartRun(ctx, "words", []string{"one two", "three"})
	if err != nil {
		fmt.Println(err)
		return
	}
	waiting, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := client.WaitRun(waiting, id)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(run.Status, string(run.Output))

	// What SIGTERM does in `pgflow-wasm serve`: stop taking tasks, drain, write outcomes.
	fmt.Println("stopped:", client.Stop(ctx))
	// Output:
	// completed {"check": {"sum": 3}}
	// stopped: <nil>
}

// Start a run in the same transaction as the rows it is about: both commit, or neither.
func ExampleClient_StartRunTx() {
	db, done := exampleDatabase()
	defer done()
	ctx := context.Background()

	root, _ := filepath.Abs(".")
	flows, _ := flowfile.Parse("example", root, []byte(`
flows:
  - slug: greet
    steps:
      - {slug: hello, module: modules/examples/c/greet.wasm}
`))
	client, err := pgflowwasm.NewClient(db.Pool, pgflowwasm.Config{Flows: flows})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx)

	var id string
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `create table signups (name text)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `insert into signups values ('Ada')`); err != nil {
			return err
		}
		id, err = client.StartRunTx(ctx, tx, "greet", map[string]string{"name": "Ada"})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	waiting, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := client.WaitRun(waiting, id)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(run.Status, string(run.Output))
	// Output:
	// completed {"hello": {"greeting": "Hello, Ada!"}}
}

// Serve the dashboard on /ops/ of your own server, beside your own routes; Stop closes it.
// Give it a token wherever the server is reached from another machine: without one it
// answers only requests addressed to localhost.
func ExampleClient_DashboardHandler() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	client, err := pgflowwasm.NewClient(pool, pgflowwasm.Config{FlowsPath: "flows.yaml"})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)

	dash, err := client.DashboardHandler(pgflowwasm.DashboardOptions{BasePath: "/ops", Token: os.Getenv("OPS_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", dash)
	mux.Handle("/health/", http.StripPrefix("/health", client.HealthHandler()))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "your own page") })
	log.Fatal(http.ListenAndServe(":8080", mux))
}

// exampleDatabase borrows a fresh, migrated database from internal/testkit/pgtest for a
// runnable example, which has no *testing.T of its own.
func exampleDatabase() (*pgtest.DB, func()) {
	tb := &exampleTB{}
	db := pgtest.NewDB(tb)
	return db, tb.cleanup
}

// exampleTB is the part of testing.TB that pgtest uses; failures panic.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Name() string                   { return "Example" }
func (e *exampleTB) Failed() bool                   { return false }
func (e *exampleTB) Logf(string, ...any)            {}
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Skip(a ...any)                  { panic(fmt.Sprint(a...)) }
func (e *exampleTB) cleanup() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
