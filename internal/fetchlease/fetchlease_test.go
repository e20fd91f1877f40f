package fetchlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/fetchlease"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// acquire takes a lease of queue or fails the test on an error.
func acquire(t *testing.T, l *fetchlease.Leases, queue string) bool {
	t.Helper()
	got, err := l.Acquire(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAQueuesLeasesGoToAsManyWorkersAsItHasSlots(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	workers := make([]*fetchlease.Leases, 3)
	for i := range workers {
		workers[i] = fetchlease.New(fetchlease.Config{Pool: db.Pool, Slots: 2})
		defer workers[i].Close(ctx)
	}
	if !acquire(t, workers[0], "orders") || !acquire(t, workers[1], "orders") {
		t.Fatal("the first two workers were refused one of the queue's two leases")
	}
	if acquire(t, workers[2], "orders") {
		t.Fatal("a third worker got a lease of a queue with two")
	}
	if !acquire(t, workers[0], "orders") {
		t.Fatal("a holder asking again was refused its own lease")
	}
	// Another queue's leases are its own.
	if !acquire(t, workers[2], "invoices") {
		t.Fatal("a lease of another queue was refused")
	}
	// A lease given back goes to the next who asks.
	if err := workers[1].Release(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if workers[1].Held("orders") {
		t.Fatal("Held after Release")
	}
	if !acquire(t, workers[2], "orders") || !workers[2].Held("orders") {
		t.Fatal("the lease given back was not taken by the worker waiting for it")
	}
}

func TestAWorkersLeasesEndWithItsSession(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	a := fetchlease.New(fetchlease.Config{Pool: db.Pool, Slots: 1})
	b := fetchlease.New(fetchlease.Config{Pool: db.Pool, Slots: 1})
	defer b.Close(ctx)
	if !acquire(t, a, "q") || acquire(t, b, "q") {
		t.Fatal("one lease went to both workers, or to neither")
	}
	a.Close(ctx) // a worker stopping
	if a.Held("q") {
		t.Fatal("Held after Close")
	}
	if !acquire(t, b, "q") {
		t.Fatal("the lease of a closed worker was not free")
	}

	// A session the server ends (a killed worker's, a cut connection) drops its leases; its
	// worker, told by an error, counts none held and reconnects on its next ask.
	if _, err := db.Pool.Exec(ctx, `select pg_terminate_backend(pid) from pg_stat_activity
		where datname = current_database() and application_name = 'pgflow-wasm fetch leases'`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left int
		if err := db.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and application_name = 'pgflow-wasm fetch leases'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break // the terminated backend has exited, and its locks with it
		}
		if time.Now().After(deadline) {
			t.Fatal("the terminated lease session is still there")
		}
	}
	if !acquire(t, a, "q") {
		t.Fatal("the lease of a terminated session was not free")
	}
	if err := b.Release(ctx, "q"); err == nil {
		t.Fatal("giving back a lease on a terminated session reported no error")
	}
	if b.Held("q") || acquire(t, b, "q") {
		t.Fatal("the worker whose session ended still holds, or took, the lease another holds")
	}
	a.Close(ctx)
}

func TestLeaseKeysDifferByQueueAndSlot(t *testing.T) {
	seen := map[int64]string{}
	for _, q := range []string{"a", "b", "orders", "Orders", "orders_s1"} {
		for slot := range 4 {
			k := fetchlease.Key(q, slot)
			if other, ok := seen[k]; ok {
				t.Fatalf("Key(%q, %d) = Key of %s", q, slot, other)
			}
			seen[k] = q
		}
	}
}
