package liveness_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/liveness"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

func TestLockClassSpellsPgfw(t *testing.T) {
	c := uint32(liveness.LockClass)
	if got := string([]byte{byte(c >> 24), byte(c >> 16), byte(c >> 8), byte(c)}); got != "pgfw" {
		t.Fatalf("LockClass spells %q", got)
	}
}

func TestLockKeyIsTheFirstFourBytes(t *testing.T) {
	for id, want := range map[string]int32{
		"00000001-0000-4000-8000-000000000000": 1,
		"ffffffff-0000-4000-8000-000000000000": -1,
		"7fffffff-1234-4000-8000-000000000000": 0x7fffffff,
	} {
		got, err := liveness.LockKey(id)
		if err != nil || got != want {
			t.Errorf("LockKey(%s) = %d, %v; want %d", id, got, err, want)
		}
	}
	if _, err := liveness.LockKey("not-a-uuid"); err == nil {
		t.Error("LockKey accepted a non-uuid")
	}
}

func TestAHeldLockIsSeenAndAReleasedOneIsNot(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	id := kit.NewUUID()
	key, err := liveness.LockKey(id)
	if err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		var ok bool
		if err := db.Pool.QueryRow(ctx, `select exists (select 1 from (`+liveness.HeldLocksSQL+`) h where h.objid = `+
			liveness.KeySQL("$1::uuid")+`)`, id).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if held() {
		t.Fatal("a lock nobody took is seen as held")
	}
	holder := db.Conn(t)
	if _, err := holder.Exec(ctx, `select pg_advisory_lock($1::int4, $2::int4)`, liveness.LockClass, key); err != nil {
		t.Fatal(err)
	}
	if !held() {
		t.Fatal("a held lock is not seen")
	}
	holder.Close(ctx) // the session ends, as when the process is killed
	deadline := time.Now().Add(10 * time.Second)
	for held() {
		if time.Now().After(deadline) {
			t.Fatal("the lock of a closed session is still seen after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
