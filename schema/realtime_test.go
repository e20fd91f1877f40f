package schema_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

func TestRealtimeSendPayloadIsSmallAndHasNoOutput(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	listener := db.Conn(t)
	channel := schema.RunChannel("r1")
	if err := schema.ListenEvents(ctx, listener, channel); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 5000) // 2 bytes each, and JSON may escape more
	payload := map[string]any{"run_id": "r1", "flow_slug": long, "step_slug": long, "status": long,
		"output": strings.Repeat("o", 100000), "event_type": "step:completed"}
	if _, err := db.Pool.Exec(ctx, `SELECT realtime.send($1, $2, $3, false)`, payload, "step:"+long+":completed", channel); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(n.Payload), &got); err != nil {
		t.Fatalf("payload is not JSON: %v", err)
	}
	if len(n.Payload) >= 8000 || got["output"] != nil || strings.Contains(n.Payload, "ooo") {
		t.Fatalf("payload of %d bytes, output present: %v", len(n.Payload), got["output"] != nil)
	}
	for _, k := range []string{"event", "run_id", "flow_slug", "step_slug", "status"} {
		if got[k] == nil {
			t.Fatalf("payload lacks %s: %.300s", k, n.Payload)
		}
	}
}

func TestRealtimeSendNeverRaises(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for _, call := range []string{
		`SELECT realtime.send(NULL, NULL, NULL)`,
		`SELECT realtime.send('[1, 2]'::jsonb, 'e', 'pgflow:run:x')`,
		`SELECT realtime.send('"scalar"'::jsonb, 'e', 'pgflow:run:x', true)`,
		`SELECT realtime.send('{}'::jsonb, 'e', repeat('t', 500))`, // channel name too long for NOTIFY
		`SELECT realtime.send('{}'::jsonb, 'e', '')`,
	} {
		if _, err := db.Pool.Exec(context.Background(), call); err != nil {
			t.Errorf("%s raised: %v", call, err)
		}
	}
}

// TestRealtimeSendNotifiesRegisteredListenersOnly: a NOTIFY makes its transaction take a
// database-wide lock at commit, so realtime.send sends one only to channels a session
// registered with realtime.pgflow_wasm_listen (schema.ListenEvents).
func TestRealtimeSendNotifiesRegisteredListenersOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	channel := schema.RunChannel("r2")
	bare, registered := db.Conn(t), db.Conn(t)
	if _, err := bare.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	send := func(event string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `SELECT realtime.send('{"run_id": "r2"}', $1, $2, false)`, event, channel); err != nil {
			t.Fatal(err)
		}
	}
	heard := func(conn *pgx.Conn, within time.Duration) string {
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			return ""
		}
		return n.Payload
	}
	send("run:started")
	if p := heard(bare, 300*time.Millisecond); p != "" {
		t.Fatalf("an unregistered LISTEN heard %s: realtime.send notifies channels nobody registered", p)
	}
	if err := schema.ListenEvents(ctx, registered, channel); err != nil {
		t.Fatal(err)
	}
	send("run:completed")
	if p := heard(registered, 5*time.Second); !strings.Contains(p, "run:completed") {
		t.Fatalf("the registered listener heard %q, want the run:completed event", p)
	}
	// Every LISTEN of the channel hears it while one session is registered.
	if p := heard(bare, 5*time.Second); !strings.Contains(p, "run:completed") {
		t.Fatalf("the bare listener heard %q while another session is registered", p)
	}
	if err := schema.UnlistenEvents(ctx, registered, ""); err != nil {
		t.Fatal(err)
	}
	send("run:failed")
	if p := heard(bare, 300*time.Millisecond); p != "" {
		t.Fatalf("after the only listener left, realtime.send still notified: %s", p)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM realtime.pgflow_wasm_listeners`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("listener rows after unlisten: %d, %v", rows, err)
	}
}

// A session waiting only for the run's end (start --wait) hears run:completed and
// run:failed, not the steps' events, which are then not sent at all; one session of the
// channel asking for every event gets them all, and so does the first.
func TestRealtimeListenersOfTheRunsEndOnlyAreSpentNoStepEvents(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	channel := schema.RunChannel("r4")
	waiter, watcher := db.Conn(t), db.Conn(t)
	send := func(event string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `SELECT realtime.send('{"run_id": "r4"}', $1, $2, false)`, event, channel); err != nil {
			t.Fatal(err)
		}
	}
	heard := func(conn *pgx.Conn) []string {
		var events []string
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return events
			}
			var ev struct{ Event string }
			_ = json.Unmarshal([]byte(n.Payload), &ev)
			events = append(events, ev.Event)
		}
	}
	if err := schema.ListenRunEnd(ctx, waiter, channel); err != nil {
		t.Fatal(err)
	}
	sends := []string{"step:a:started", "step:a:completed", "run:completed", "run:failed"}
	for _, e := range sends {
		send(e)
	}
	if got := heard(waiter); strings.Join(got, " ") != "run:completed run:failed" {
		t.Fatalf("waiting for the run's end, the session heard %q; want run:completed run:failed only", got)
	}
	if err := schema.ListenEvents(ctx, watcher, channel); err != nil {
		t.Fatal(err)
	}
	for _, e := range sends {
		send(e)
	}
	for name, conn := range map[string]*pgx.Conn{"the waiter": waiter, "the watcher": watcher} {
		if got := heard(conn); strings.Join(got, " ") != strings.Join(sends, " ") {
			t.Errorf("with a watcher of every event registered, %s heard %q; want %q", name, got, sends)
		}
	}
}

// TestRealtimeListenerOfAnEndedSessionIsForgotten: a listener killed without unlistening
// leaves a row (it only costs NOTIFYs); the next registration removes it.
func TestRealtimeListenerOfAnEndedSessionIsForgotten(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	gone, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.ListenEvents(ctx, gone, schema.RunChannel("old")); err != nil {
		t.Fatal(err)
	}
	pid := gone.PgConn().PID()
	if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid); err != nil {
		t.Fatal(err)
	}
	_ = gone.Close(ctx)
	if err := schema.ListenEvents(ctx, db.Conn(t), schema.RunChannel("new")); err != nil {
		t.Fatal(err)
	}
	var channels []string
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(channel ORDER BY channel), '{}') FROM realtime.pgflow_wasm_listeners`).Scan(&channels); err != nil {
		t.Fatal(err)
	}
	if len(channels) != 1 || channels[0] != schema.RunChannel("new") {
		t.Fatalf("registered channels = %v, want only the live session's", channels)
	}
}

// TestRealtimeListenWithoutPrivileges: any role can register, and any role that may call
// pgflow's functions can call realtime.send, with no grant on pgflow-wasm's table.
func TestRealtimeListenWithoutPrivileges(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	role := db.Role(t, "rt", "LOGIN")
	if _, err := db.Pool.Exec(ctx, `GRANT USAGE ON SCHEMA realtime TO `+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, db.URLAs(t, role))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	channel := schema.RunChannel("r3")
	if err := schema.ListenEvents(ctx, conn, channel); err != nil {
		t.Fatalf("registering as a role without grants: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT realtime.send('{}', 'run:started', $1)`, channel); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := conn.WaitForNotification(wctx); err != nil {
		t.Fatalf("the event sent by a role without grants did not arrive: %v", err)
	}
}
