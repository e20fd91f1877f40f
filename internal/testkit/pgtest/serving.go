package pgtest

import (
	"context"
	"testing"
	"time"
)

// WaitServing waits until a live worker has registered for the flow: a worker process
// compiles its flows before it registers, so from then on a started run is served.
func (db *DB) WaitServing(t testing.TB, flow string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := db.Pool.QueryRow(context.Background(),
			`select count(*) from pgflow.workers where queue_name = $1 and deprecated_at is null`, flow).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no worker registered for flow %s within 60 s", flow)
}
