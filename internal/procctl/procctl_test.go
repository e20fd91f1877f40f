package procctl_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// A registered process is drained by its id or by any of its rows' ids, once: a second
// drain changes nothing and records nothing; undrain clears it. Each change is audited.
func TestDrainAndUndrainAreRecordedOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	p := procctl.Self(kit.NewUUID(), "v-test")
	rows := []string{kit.NewUUID(), kit.NewUUID()}
	if err := procctl.Register(ctx, db.Pool, p, rows); err != nil {
		t.Fatal(err)
	}
	if err := procctl.Register(ctx, db.Pool, p, rows[1:]); err != nil { // a reload registers again
		t.Fatalf("registering again: %v", err)
	}
	drained := func() bool {
		t.Helper()
		d, err := procctl.Drained(ctx, db.Pool, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if drained() {
		t.Fatal("a new process is drained")
	}
	for i, step := range []struct {
		act         func(context.Context, *pgxpool.Pool, string, string) (procctl.Changed, error)
		id          string
		wantChanged bool
		wantDrained bool
	}{
		{procctl.Drain, rows[1], true, true},
		{procctl.Drain, strings.ToUpper(p.ID), false, true},
		{procctl.Undrain, rows[0], true, false},
		{procctl.Undrain, p.ID, false, false},
	} {
		c, err := step.act(ctx, db.Pool, step.id, "alice")
		if err != nil || c.ProcessID != p.ID || c.Host != p.Host || c.Changed != step.wantChanged || drained() != step.wantDrained {
			t.Fatalf("step %d: %+v, %v; drained %v; want changed %v, drained %v", i, c, err, drained(), step.wantChanged, step.wantDrained)
		}
	}
	var audit string
	if err := db.Pool.QueryRow(ctx, `select string_agg(action || ' by ' || actor, ', ' order by id) from pgflow_wasm.operator_actions
		where process_id = $1::uuid`, p.ID).Scan(&audit); err != nil || audit != "drain by alice, undrain by alice" {
		t.Errorf("audit: %q (%v)", audit, err)
	}
}

// An id that is no process and no worker row of one is refused, saying so.
func TestDrainingAnUnknownIDIsRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for _, id := range []string{"not-a-uuid", "7c9e6679-7425-40de-944b-e07fc1f90ae7"} {
		if _, err := procctl.Drain(context.Background(), db.Pool, id, "test"); !errors.Is(err, procctl.ErrNotFound) {
			t.Errorf("Drain(%q): %v, want ErrNotFound", id, err)
		}
	}
}
