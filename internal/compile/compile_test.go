package compile_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// load parses a flows file; module paths point at /dev/null, which exists: compile never
// looks inside modules.
func load(t *testing.T, yamlText string) *flowfile.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flows.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := flowfile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

const shop = `
flows:
  - slug: shop
    max_attempts: 4
    base_delay: 2
    timeout: 30
    steps:
      - {slug: total, depends_on: [price], module: /dev/null}
      - {slug: validate, module: /dev/null}
      - {slug: price, type: map, depends_on: [validate], module: /dev/null, timeout: 5, start_delay: 1}
`

func TestCompileCreatesFlowsWithEveryOptionExplicit(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	rep, err := compile.Compile(ctx, db.Pool, load(t, shop), compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep) != 1 || rep[0].Action != compile.Created {
		t.Fatalf("report = %+v, want shop created", rep)
	}
	var attempts, delay, timeout int
	if err := db.Pool.QueryRow(ctx, `select opt_max_attempts, opt_base_delay, opt_timeout from pgflow.flows where flow_slug = 'shop'`).
		Scan(&attempts, &delay, &timeout); err != nil {
		t.Fatal(err)
	}
	if attempts != 4 || delay != 2 || timeout != 30 {
		t.Errorf("flow options %d/%d/%d, want 4/2/30", attempts, delay, timeout)
	}
	rows, err := db.Pool.Query(ctx, `select s.step_slug, s.step_type, s.step_index, coalesce(s.opt_timeout, -1), coalesce(s.opt_start_delay, -1),
		coalesce((select string_agg(dep_slug, ',') from pgflow.deps d where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '')
		from pgflow.steps s where flow_slug = 'shop' order by step_index`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var slug, typ, deps string
		var idx, tmo, start int
		if err := rows.Scan(&slug, &typ, &idx, &tmo, &start, &deps); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%s/%s/%d/%d", slug, typ, deps, tmo, start))
	}
	want := "validate/single//-1/-1 price/map/validate/5/1 total/single/price/-1/-1"
	if strings.Join(got, " ") != want {
		t.Errorf("steps in order = %s\nwant %s", strings.Join(got, " "), want)
	}
}

func TestRecompilingTheSameFlowChangesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	f := load(t, shop)
	if _, err := compile.Compile(ctx, db.Pool, f, compile.Options{}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var s string
		if err := db.Pool.QueryRow(ctx, `select (select string_agg(row(f.*)::text, ';') from pgflow.flows f) ||
			(select string_agg(row(s.*)::text, ';' order by step_index) from pgflow.steps s) ||
			(select string_agg(row(d.*)::text, ';' order by step_slug, dep_slug) from pgflow.deps d)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()
	rep, err := compile.Compile(ctx, db.Pool, f, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep[0].Action != compile.Unchanged {
		t.Errorf("second compile: %s, want unchanged", rep[0].Action)
	}
	if after := snapshot(); after != before {
		t.Errorf("second compile changed the database:\n%s\n%s", before, after)
	}
}

func TestAChangedShapeIsRefusedWithWhatDiffers(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := compile.Compile(ctx, db.Pool, load(t, shop), compile.Options{}); err != nil {
		t.Fatal(err)
	}
	changed := load(t, `
flows:
  - slug: shop
    max_attempts: 4
    base_delay: 2
    timeout: 30
    steps:
      - {slug: validate, module: /dev/null}
      - {slug: price, depends_on: [validate], module: /dev/null}
      - {slug: ship, depends_on: [price], module: /dev/null}
`)
	_, err := compile.Compile(ctx, db.Pool, changed, compile.Options{UpdateOptions: true})
	var shape *pgflowtype.ShapeError
	if !errors.As(err, &shape) {
		t.Fatalf("err = %v, want a pgflowtype.ShapeError", err)
	}
	for _, want := range []string{`step "price" is single in the file, map in the database`, `step "ship" is in the file but not in the database`,
		`step "total" is in the database but not in the file`, "give the changed flow a new slug (e.g. shop_v2)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
	var steps int
	if err := db.Pool.QueryRow(ctx, `select count(*) from pgflow.steps where flow_slug = 'shop'`).Scan(&steps); err != nil || steps != 3 {
		t.Errorf("the refused compile changed the steps (%d, %v)", steps, err)
	}
}

func TestChangedOptionsAreReportedAndWrittenOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := compile.Compile(ctx, db.Pool, load(t, shop), compile.Options{}); err != nil {
		t.Fatal(err)
	}
	tuned := load(t, strings.Replace(strings.Replace(shop, "timeout: 30", "timeout: 45", 1), "timeout: 5,", "timeout: 7,", 1))
	rep, err := compile.Compile(ctx, db.Pool, tuned, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep[0].Action != compile.OptionsDiffer || len(rep[0].Options) != 2 {
		t.Fatalf("report = %+v, want two option differences, not written", rep[0])
	}
	if !strings.Contains(strings.Join(rep[0].Options, "\n"), "step price timeout: 5 in the database, 7 in the file") {
		t.Errorf("differences = %q", rep[0].Options)
	}
	timeout := func() (flow, step int) {
		if err := db.Pool.QueryRow(ctx, `select f.opt_timeout, s.opt_timeout from pgflow.flows f join pgflow.steps s using (flow_slug)
			where flow_slug = 'shop' and s.step_slug = 'price'`).Scan(&flow, &step); err != nil {
			t.Fatal(err)
		}
		return
	}
	if f, s := timeout(); f != 30 || s != 5 {
		t.Errorf("options written without --update-options: %d, %d", f, s)
	}
	rep, err = compile.Compile(ctx, db.Pool, tuned, compile.Options{UpdateOptions: true})
	if err != nil || rep[0].Action != compile.OptionsUpdated {
		t.Fatalf("update: %+v, %v", rep, err)
	}
	if f, s := timeout(); f != 45 || s != 7 {
		t.Errorf("after --update-options: %d, %d; want 45, 7", f, s)
	}
}

// A worker login of `db grant-worker` may add pgmq's notify trigger to a queue (its TRIGGER
// grant) but not drop one (that takes the owner), and pgmq.enable_notify_insert drops the
// old one first: a queue that already notifies is left alone, or every worker restart after
// the first would fall back to polling. Compiled by the owner with NotifyInserts, a queue
// notifies before any worker starts, on every pgmq.
func TestAWorkerLoginListensAgainAfterARestartAndAfterTheOwnersCompile(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	login := db.Role(t, "notify_worker", "LOGIN")
	if _, err := schema.GrantWorker(ctx, db.Conn(t), login, ""); err != nil {
		t.Fatal(err)
	}
	worker := db.PoolAs(t, login)
	restarted := strings.ReplaceAll(shop, "slug: shop", "slug: shop_restarted")
	if _, err := compile.Compile(ctx, db.Pool, load(t, restarted), compile.Options{}); err != nil {
		t.Fatal(err)
	}
	// On a pgmq without enable_notify_insert (the real 1.5 to 1.7) the worker's own trigger
	// takes rights in schema pgflow_wasm the login lacks: only the owner's compile helps there.
	var native bool
	if err := db.Pool.QueryRow(ctx, `select to_regproc('pgmq.enable_notify_insert') is not null`).Scan(&native); err != nil {
		t.Fatal(err)
	}
	for start := 1; native && start <= 2; start++ {
		if _, err := poller.EnableInsertNotify(ctx, worker, "shop_restarted"); err != nil {
			t.Fatalf("the worker login's start %d: %v", start, err)
		}
	}
	reports, err := compile.Compile(ctx, db.Pool, load(t, shop), compile.Options{NotifyInserts: true})
	if err != nil || len(reports) != 1 || reports[0].NotifyErr != nil {
		t.Fatalf("compile: %+v, %v", reports, err)
	}
	how, err := poller.EnableInsertNotify(ctx, worker, "shop")
	if err != nil || how != "already on" {
		t.Fatalf("the login after the owner's compile: %q, %v; want already on", how, err)
	}
}
