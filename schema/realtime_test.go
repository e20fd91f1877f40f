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
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
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
