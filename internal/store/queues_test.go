package store_test

import (
	"context"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// QueueBacklogs counts the visible messages of each queue asked for and the age of the
// oldest of them: a message a reader holds (vt ahead) and a delayed one are not waiting; a
// queue asked for twice or in another case is read as pgmq names its table.
func TestQueueBacklogsCountOnlyVisibleMessages(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	for _, sql := range []string{
		`select pgmq.create('busy')`, `select pgmq.create('empty')`,
		`select pgmq.send('busy', '{}')`, `select pgmq.send('busy', '{}')`,
		`select pgmq.send('busy', '{}', 3600)`, // delayed an hour
		`select pgmq.send('busy', '{}')`,
		`select msg_id from pgmq.read('busy', 600, 1)`, // a reader holds the first one
		`update pgmq.q_busy set enqueued_at = now() - interval '90 seconds' where msg_id = 2`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	got, err := store.QueueBacklogs(ctx, db.Pool, []string{"busy", "empty"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Queue != "busy" || got[0].Visible != 2 || got[0].OldestAge < 90 || got[0].OldestAge > 120 ||
		got[1].Queue != "empty" || got[1].Visible != 0 || got[1].OldestAge != 0 {
		t.Errorf("backlogs %+v, want busy: 2 visible, oldest 90 s; empty: 0, 0", got)
	}
	if _, err := store.QueueBacklogs(ctx, db.Pool, []string{"busy", "no_such_queue"}); err == nil {
		t.Error("a queue without a table read without an error")
	}
}

// BenchmarkQueueBacklogs reads the backlog of a queue of 100,000 messages, half of them
// visible: what one scrape of the worker's /metrics costs the database.
func BenchmarkQueueBacklogs(b *testing.B) {
	db := pgtest.NewDB(b)
	ctx := context.Background()
	for _, sql := range []string{
		`select pgmq.create('deep')`,
		`insert into pgmq.q_deep (vt, message) select now() + case when i % 2 = 0 then interval '1 hour' else interval '0' end, '{}'
		 from generate_series(1, 100000) i`,
		`analyze pgmq.q_deep`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			b.Fatalf("%s: %v", sql, err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		got, err := store.QueueBacklogs(ctx, db.Pool, []string{"deep"})
		if err != nil || got[0].Visible != 50000 {
			b.Fatalf("%+v, %v", got, err)
		}
	}
}
