package live_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/live"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

const appName = "pgflow-wasm live test"

func startListener(t *testing.T, db *pgtest.DB) *live.Listener {
	t.Helper()
	cfg := db.Pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = appName
	l := live.NewListener(cfg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

func notify(t *testing.T, db *pgtest.DB, channel string) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `select pg_notify($1, '{}')`, channel); err != nil {
		t.Fatal(err)
	}
}

// rung waits for a value on c.
func rung(c <-chan struct{}, within time.Duration) bool {
	select {
	case <-c:
		return true
	case <-time.After(within):
		return false
	}
}

// drainFor empties c for a moment (rings from connecting).
func drainFor(c <-chan struct{}, d time.Duration) {
	deadline := time.After(d)
	for {
		select {
		case <-c:
		case <-deadline:
			return
		}
	}
}

// waitListening waits until the listener's connection LISTENs to exactly want.
func waitListening(t *testing.T, l *live.Listener, want []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if got := l.Listening(); l.Connected() && slices.Equal(got, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("listener LISTENs to %v (connected %v), want %v", l.Listening(), l.Connected(), want)
}

func TestListenerDeliversOnlyWantedChannelsAndSurvivesAReconnect(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	l := startListener(t, db)
	a := l.Subscribe()
	defer a.Close()
	b := l.Subscribe()
	defer b.Close()
	a.Set([]string{"pgflow:run:a"})
	b.Set([]string{"pgflow:run:a", "pgflow:run:b"})
	waitListening(t, l, []string{"pgflow:run:a", "pgflow:run:b"})
	drainFor(a.C, 200*time.Millisecond)
	drainFor(b.C, 0)

	notify(t, db, "pgflow:run:b")
	if !rung(b.C, 10*time.Second) {
		t.Fatal("subscriber of b was not told about b")
	}
	if rung(a.C, 300*time.Millisecond) {
		t.Fatal("subscriber of a only was told about b")
	}
	notify(t, db, "pgflow:run:a")
	if !rung(a.C, 10*time.Second) || !rung(b.C, 10*time.Second) {
		t.Fatal("both subscribers of a must be told about a")
	}

	// b moves away from channel b: nobody wants it any more.
	b.Set([]string{"pgflow:run:a"})
	waitListening(t, l, []string{"pgflow:run:a"})
	drainFor(b.C, 100*time.Millisecond)
	notify(t, db, "pgflow:run:b")
	if rung(b.C, 300*time.Millisecond) {
		t.Fatal("told about a channel it left")
	}

	// The connection dies (this database's only: other suites on the cluster run this test
	// too): subscribers are told (they may have missed events), and
	// notifications flow again on the new connection.
	var killed int
	if err := db.Pool.QueryRow(context.Background(), `select count(pg_terminate_backend(pid)) from pg_stat_activity
		where application_name = $1 and datname = current_database()`, appName).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminating the listener's connection: %d, %v", killed, err)
	}
	if !rung(a.C, 30*time.Second) {
		t.Fatal("subscribers were not told that the connection came back")
	}
	waitListening(t, l, []string{"pgflow:run:a"})
	drainFor(a.C, 100*time.Millisecond)
	notify(t, db, "pgflow:run:a")
	if !rung(a.C, 10*time.Second) {
		t.Fatal("no notification after the reconnect")
	}
}

// Two pages with the same key share one watch: one probe, both told of each change; the
// watch ends with its last subscriber.
func TestHubSharesAWatchPerPage(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	l := startListener(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A long poll interval: only notifications make the watch probe again.
	hub := live.NewHub(ctx, l, slog.New(slog.DiscardHandler), time.Hour, time.Hour)
	var version, probes atomic.Int64
	probe := func(context.Context) (live.State, error) {
		probes.Add(1)
		return live.State{Fingerprint: "v" + string(rune('0'+version.Load())), Channels: []string{"pgflow:run:x"}, Active: true}, nil
	}
	w1 := hub.Watch("page", probe)
	if fp := next(t, w1.C); fp != "v0" {
		t.Fatalf("first fingerprint %q, want v0", fp)
	}
	w2 := hub.Watch("page", probe)
	if fp := next(t, w2.C); fp != "v0" {
		t.Fatalf("a second subscriber gets the current fingerprint first: %q", fp)
	}
	if hub.Watches() != 1 {
		t.Fatalf("%d watches for one page", hub.Watches())
	}
	waitListening(t, l, []string{"pgflow:run:x"})
	version.Store(1)
	notify(t, db, "pgflow:run:x")
	if a, b := next(t, w1.C), next(t, w2.C); a != "v1" || b != "v1" {
		t.Fatalf("after the change: %q and %q, want v1", a, b)
	}
	if n := probes.Load(); n > 3 {
		t.Errorf("%d probes for two subscribers and one event: the watch is not shared", n)
	}
	w1.Close()
	w2.Close()
	if hub.Watches() != 0 {
		t.Fatal("the watch outlived its subscribers")
	}
	waitListening(t, l, nil)
}

func next(t *testing.T, c <-chan live.Update) string {
	t.Helper()
	select {
	case u := <-c:
		if u.Err != nil {
			t.Fatalf("an error instead of a fingerprint: %v", u.Err)
		}
		return u.Fingerprint
	case <-time.After(30 * time.Second):
		t.Fatal("no fingerprint within 30 s")
		return ""
	}
}

// A page whose state cannot be read (the database went away) is told so once, and told
// again when it can be read, even when nothing on it changed meanwhile.
func TestHubTellsWhenReadingFailsAndWorksAgain(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	l := startListener(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := live.NewHub(ctx, l, slog.New(slog.DiscardHandler), 20*time.Millisecond, time.Hour)
	var down atomic.Bool
	probe := func(context.Context) (live.State, error) {
		if down.Load() {
			return live.State{}, errors.New("connection refused")
		}
		return live.State{Fingerprint: "v0", Active: true}, nil // polled every 20 ms
	}
	w := hub.Watch("page", probe)
	defer w.Close()
	if fp := next(t, w.C); fp != "v0" {
		t.Fatalf("first fingerprint %q", fp)
	}
	down.Store(true)
	select {
	case u := <-w.C:
		if u.Err == nil || u.Err.Error() != "connection refused" {
			t.Fatalf("update %+v, want the error", u)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no update within 30 s of the probe failing")
	}
	select {
	case u := <-w.C:
		t.Fatalf("the error was sent again: %+v", u)
	case <-time.After(200 * time.Millisecond): // ten failed polls
	}
	down.Store(false)
	if fp := next(t, w.C); fp != "v0" {
		t.Fatalf("after the failure: %q, want v0 again", fp)
	}
}
