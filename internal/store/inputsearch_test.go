package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// The query language of the search by input field, without a database.
func TestInputQueriesBecomeTheJSONTheInputContains(t *testing.T) {
	for q, want := range map[string]string{
		`input.customer = cus_42`:                               `{"customer":"cus_42"}`,
		`input.customer="cus_42"`:                               `{"customer":"cus_42"}`,
		`input.order.total = 10 AND input.order.currency = EUR`: `{"order":{"currency":"EUR","total":10}}`,
		`input.vip = true and input.note = null`:                `{"note":null,"vip":true}`,
		`input.items = [{"sku": "A1"}]`:                         `{"items":[{"sku":"A1"}]}`,
		`input.name = Ada Lovelace`:                             `{"name":"Ada Lovelace"}`,
	} {
		got, err := store.ParseInputQuery(q)
		if err != nil || string(got) != want {
			t.Errorf("ParseInputQuery(%q) = %s, %v; want %s", q, got, err, want)
		}
	}
	for _, q := range []string{`input.customer`, `input. = 1`, `input.a = 1 and b = 2`, `input.a = 1 and input.a = 2`, `input.a = 1 and input.a.b = 2`} {
		if _, err := store.ParseInputQuery(q); !errors.Is(err, store.ErrBadSearch) {
			t.Errorf("ParseInputQuery(%q): %v, want ErrBadSearch", q, err)
		}
	}
}

// Runs found by fields of their input: the exact value only (cus_4 is not cus_42), nested
// fields, numbers as numbers; and the query can use schema.InputIndex, which `db install`
// made in the test database.
func TestSearchInputFindsRunsByAFieldOfTheirInput(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workertest.Compile(t, db.Pool, workertest.FlowsFile(t, echoFlows, nil))
	inputs := []string{
		`{"customer": "cus_42", "order": {"total": 10}}`,
		`{"customer": "cus_42", "order": {"total": 11}}`,
		`{"customer": "cus_4", "order": {"total": 10}}`,
		`{"customer": {"id": "cus_42"}}`,
	}
	ids := make([]string, len(inputs))
	for i, in := range inputs {
		if err := db.Pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('one', $1::jsonb)`, in).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, db)
	search := func(q string) string {
		t.Helper()
		doc, err := store.ParseInputQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.SearchInput(ctx, doc, 10)
		if err != nil {
			t.Fatalf("SearchInput(%s): %v", doc, err)
		}
		var out []string
		for _, r := range res.Runs {
			for i, id := range ids {
				if r.ID == id {
					out = append(out, string(rune('0'+i)))
				}
			}
		}
		return strings.Join(out, ",")
	}
	for q, want := range map[string]string{
		`input.customer = cus_42`:                            "1,0", // newest first
		`input.customer = cus_42 and input.order.total = 10`: "0",
		`input.order.total = 10`:                             "2,0",
		`input.customer.id = cus_42`:                         "3",
		`input.customer = nobody`:                            "",
	} {
		if got := search(q); got != want {
			t.Errorf("%s found runs %q, want %q", q, got, want)
		}
	}
	if exists, valid, err := schema.InputIndexValid(ctx, db.Pool); err != nil || !exists || !valid {
		t.Fatalf("pgflow.%s after db install: exists %v, valid %v (%v)", schema.InputIndex, exists, valid, err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Four runs are cheaper to read whole: forbid that to see the plan a large table gets.
	// Index scans on, whatever the database's defaults (PGTEST_PLAN=noindex turns them off):
	// the question is whether the index can serve the query.
	for _, set := range []string{`set local enable_seqscan = off`, `set local enable_bitmapscan = on`, `set local enable_indexscan = on`} {
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	var plan strings.Builder
	rows, err := tx.Query(ctx, `explain (costs off) select run_id from pgflow.runs where input @> '{"customer": "cus_42"}'::jsonb`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if !strings.Contains(plan.String(), schema.InputIndex) {
		t.Errorf("the containment query does not use pgflow.%s:\n%s", schema.InputIndex, plan.String())
	}
}
