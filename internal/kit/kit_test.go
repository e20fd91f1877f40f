package kit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// A session is named, and its own: a lock it takes is held after the pool's connections
// have come and gone, and dropped when it closes.
func TestASessionIsNamedAndHoldsItsOwnLocks(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := kit.OpenSession(ctx, db.Pool, "pgflow-wasm test session")
	if err != nil {
		t.Fatal(err)
	}
	var app string
	if err := conn.QueryRow(ctx, `select current_setting('application_name')`).Scan(&app); err != nil || app != "pgflow-wasm test session" {
		t.Fatalf("application_name %q, %v", app, err)
	}
	if _, err := conn.Exec(ctx, `select pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	var free bool
	if err := db.Pool.QueryRow(ctx, `select pg_try_advisory_lock(4242)`).Scan(&free); err != nil || free {
		t.Fatalf("a pool connection took the session's lock: %v, %v", free, err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The server drops a closed session's locks when its backend exits, a moment later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := db.Pool.QueryRow(ctx, `select pg_try_advisory_lock(4242)`).Scan(&free); err != nil {
			t.Fatal(err)
		}
		if free {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed session's lock is still held")
		}
	}
}
