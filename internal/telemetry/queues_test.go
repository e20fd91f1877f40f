package telemetry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The backlog gauges: scrapes close together read the queues once; a reload's new worker
// takes them over and the old one's clear leaves them; a failed read leaves the gauges out
// and is counted.
func TestQueueGaugesReadOncePerIntervalAndFollowTheServingWorker(t *testing.T) {
	m := NewMetrics(nil, func() int { return 0 })
	reads := 0
	old, next := new(int), new(int)
	m.SetQueueSource(old, func(context.Context) ([]QueueStat, error) {
		reads++
		return []QueueStat{{Queue: "orders", Visible: 3, OldestAge: 12.5}}, nil
	})
	want := `
# HELP pgflow_wasm_queue_oldest_message_age_seconds Age of the oldest visible message of a served queue (since its enqueue); 0 when none is visible.
# TYPE pgflow_wasm_queue_oldest_message_age_seconds gauge
pgflow_wasm_queue_oldest_message_age_seconds{queue="orders"} 12.5
# HELP pgflow_wasm_queue_visible_messages Messages in a served queue that a worker may read now (pgmq's q_<queue> table, vt passed).
# TYPE pgflow_wasm_queue_visible_messages gauge
pgflow_wasm_queue_visible_messages{queue="orders"} 3
`
	for range 3 {
		if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
			"pgflow_wasm_queue_visible_messages", "pgflow_wasm_queue_oldest_message_age_seconds"); err != nil {
			t.Fatal(err)
		}
	}
	if reads != 1 {
		t.Errorf("3 scrapes read the queues %d times, want once", reads)
	}

	m.SetQueueSource(next, func(context.Context) ([]QueueStat, error) {
		return []QueueStat{{Queue: "orders", Visible: 0}, {Queue: "mail", Visible: 1, OldestAge: 2}}, nil
	})
	m.ClearQueueSource(old) // the old worker stops after the new one serves
	if n := testutil.CollectAndCount(m.queues, "pgflow_wasm_queue_visible_messages"); n != 2 {
		t.Errorf("after the handover: %d queues, want the new worker's 2", n)
	}

	m.SetQueueSource(old, func(context.Context) ([]QueueStat, error) { return nil, errors.New("database away") })
	if n := testutil.CollectAndCount(m.queues, "pgflow_wasm_queue_visible_messages"); n != 0 {
		t.Errorf("a failed read: %d queues exported, want none", n)
	}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP pgflow_wasm_queue_stats_errors_total Reads of the served queues' backlog that failed (the backlog gauges are then left out of the scrape).
# TYPE pgflow_wasm_queue_stats_errors_total counter
pgflow_wasm_queue_stats_errors_total 1
`), "pgflow_wasm_queue_stats_errors_total"); err != nil {
		t.Error(err)
	}
	m.ClearQueueSource(old)
	if n := testutil.CollectAndCount(m.queues, "pgflow_wasm_queue_visible_messages"); n != 0 {
		t.Errorf("no worker serves: %d queues exported", n)
	}
}
