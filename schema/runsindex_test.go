package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// waitForBuildToWait returns once the session pid is running CREATE INDEX CONCURRENTLY and
// waiting for a lock (a table lock, or another transaction's end).
func waitForBuildToWait(t *testing.T, admin *pgx.Conn, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := admin.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1
			AND wait_event_type = 'Lock' AND query LIKE 'CREATE INDEX CONCURRENTLY%')`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the index build never waited for the open transaction")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdSnapshot opens a transaction holding a snapshot, which every index build waits for.
func holdSnapshot(t *testing.T, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM pgflow.runs"); err != nil {
		t.Fatal(err)
	}
	return tx
}

type buildResult struct {
	state schema.RunsIndexState
	err   error
}

// startBuild runs ensure (EnsureRunsIndex or EnsureInputIndex) on conn in the background.
func startBuild(ensure func(context.Context, *pgx.Conn) (schema.RunsIndexState, error), conn *pgx.Conn) <-chan buildResult {
	done := make(chan buildResult, 1)
	go func() {
		state, err := ensure(context.Background(), conn)
		done <- buildResult{state, err}
	}()
	return done
}

// wantBuild waits for a build started by startBuild to end with want.
func wantBuild(t *testing.T, done <-chan buildResult, want schema.RunsIndexState) {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil || r.state != want {
			t.Fatalf("the build: %q (%v), want %q", r.state, r.err, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the build did not end a minute after what it waited for did")
	}
}

// A worker's transaction takes the upgrade lock shared. An index build must neither give up
// because one is open nor hold up the ones that begin while it runs (it waits for their
// snapshots: one waiting for it would deadlock with it).
func TestAnIndexBuildLeavesTheWorkersTransactionsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	conn, worker, admin := db.Conn(t), db.Conn(t), db.Conn(t)
	if _, err := conn.Exec(ctx, "DROP INDEX pgflow."+schema.RunsIndex); err != nil {
		t.Fatal(err)
	}
	held := holdSnapshot(t, db.Conn(t)) // keeps the build waiting while the workers' transactions run
	open, err := worker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, schema.UpgradeLockShared); err != nil {
		t.Fatal(err)
	}
	done := startBuild(schema.EnsureRunsIndex, conn)
	// A build that gave up (busy) never waits: this fails after 30 s.
	waitForBuildToWait(t, admin, conn.PgConn().PID())

	// A worker transaction begun during the build takes its lock at once.
	next := db.Conn(t)
	if _, err := next.Exec(ctx, "SET lock_timeout = '10s'"); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, next, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, schema.UpgradeLockShared)
		return err
	})
	if err != nil {
		t.Fatalf("a worker's transaction during the index build: %v", err)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantBuild(t, done, schema.RunsIndexCreated)
}

// Two processes that each build one of the indexes on pgflow.runs at the same time would
// deadlock (each build waits for the other's snapshot or for its table lock): the second
// finds the first building and leaves its index to a later run.
func TestTwoIndexBuildsAtOnceDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	first, second, admin := db.Conn(t), db.Conn(t), db.Conn(t)
	for _, index := range []string{schema.RunsIndex, schema.InputIndex} {
		if _, err := first.Exec(ctx, "DROP INDEX IF EXISTS pgflow."+index); err != nil {
			t.Fatal(err)
		}
	}
	held := holdSnapshot(t, db.Conn(t)) // keeps the first build waiting while the second starts
	firstDone := startBuild(schema.EnsureRunsIndex, first)
	waitForBuildToWait(t, admin, first.PgConn().PID())

	secondDone := startBuild(schema.EnsureInputIndex, second)
	select {
	case r := <-secondDone:
		if r.err != nil || r.state != schema.RunsIndexBusy {
			t.Fatalf("the second build: %q (%v), want %q", r.state, r.err, schema.RunsIndexBusy)
		}
	case r := <-firstDone:
		t.Fatalf("the first build ended before the second: %q (%v)", r.state, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the second build waited for the first")
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantBuild(t, firstDone, schema.RunsIndexCreated)
	if state, err := schema.EnsureInputIndex(ctx, second); err != nil || state != schema.RunsIndexCreated {
		t.Fatalf("the second index, built afterwards: %q (%v), want %q", state, err, schema.RunsIndexCreated)
	}
}

// A session that holds a snapshot the build waits for, and then waits for the build's
// table lock, deadlocks with it; PostgreSQL fails the build, which is made again.
func TestAnIndexBuildADeadlockFailedIsMadeAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	conn, other, admin := db.Conn(t), db.Conn(t), db.Conn(t)
	if _, err := conn.Exec(ctx, "DROP INDEX pgflow."+schema.RunsIndex); err != nil {
		t.Fatal(err)
	}
	// The build's session checks for the deadlock first (1 s) on any machine, and so is
	// the one PostgreSQL fails, as the build in a real deadlock of this shape usually is.
	if _, err := other.Exec(ctx, "SET deadlock_timeout = '60s'"); err != nil {
		t.Fatal(err)
	}
	tx := holdSnapshot(t, other)
	done := startBuild(schema.EnsureRunsIndex, conn)
	waitForBuildToWait(t, admin, conn.PgConn().PID())
	// What a migration altering pgflow.runs would take; granted once the build gives way.
	if _, err := tx.Exec(ctx, "LOCK TABLE pgflow.runs IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		t.Fatalf("the session the build waited for: %v (the build, not it, was to give way)", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantBuild(t, done, schema.RunsIndexCreated)
	if exists, valid, err := schema.RunsIndexValid(ctx, conn); err != nil || !exists || !valid {
		t.Fatalf("after the deadlock: exists %v, valid %v (%v)", exists, valid, err)
	}
}
