package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// QueueStat is one queue's backlog as the database has it now.
type QueueStat struct {
	Queue   string
	Visible int64 // messages a worker may read now
	// OldestAge is how long the oldest visible message has been in the queue, in seconds;
	// 0 when none is visible.
	OldestAge float64
}

// QueueSource reads the backlog of the queues a worker serves; one query a call.
type QueueSource func(ctx context.Context) ([]QueueStat, error)

// queueStatsEvery is the shortest time between two reads of the queues: scrapes closer
// together (two Prometheus replicas, a curl) get the last read again.
const queueStatsEvery = 5 * time.Second

// queueStatsTimeout bounds one read: a scrape never waits on a stuck database for long.
const queueStatsTimeout = 3 * time.Second

// queueCollector exports the backlog gauges, read at scrape time from the serving worker's
// QueueSource, at most once per queueStatsEvery.
type queueCollector struct {
	visible, age, errors *prometheus.Desc

	mu      sync.Mutex
	owner   any
	src     QueueSource
	readAt  time.Time
	last    []QueueStat
	lastErr bool
	failed  float64 // reads that failed, ever
}

func newQueueCollector() *queueCollector {
	return &queueCollector{
		visible: prometheus.NewDesc("pgflow_wasm_queue_visible_messages",
			"Messages in a served queue that a worker may read now (pgmq's q_<queue> table, vt passed).", []string{"queue"}, nil),
		age: prometheus.NewDesc("pgflow_wasm_queue_oldest_message_age_seconds",
			"Age of the oldest visible message of a served queue (since its enqueue); 0 when none is visible.", []string{"queue"}, nil),
		errors: prometheus.NewDesc("pgflow_wasm_queue_stats_errors_total",
			"Reads of the served queues' backlog that failed (the backlog gauges are then left out of the scrape).", nil, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.visible
	ch <- c.age
	ch <- c.errors
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src != nil && time.Since(c.readAt) >= queueStatsEvery {
		ctx, cancel := context.WithTimeout(context.Background(), queueStatsTimeout)
		stats, err := c.src(ctx)
		cancel()
		c.readAt = time.Now()
		c.last, c.lastErr = stats, err != nil
		if err != nil {
			c.failed++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, c.failed)
	if c.src == nil || c.lastErr {
		return
	}
	for _, s := range c.last {
		ch <- prometheus.MustNewConstMetric(c.visible, prometheus.GaugeValue, float64(s.Visible), s.Queue)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, s.OldestAge, s.Queue)
	}
}

// SetQueueSource makes src the source of the backlog gauges, for owner (the worker that
// serves now: a reload's new worker takes over from the old one).
func (m *Metrics) SetQueueSource(owner any, src QueueSource) {
	if m == nil {
		return
	}
	c := m.queues
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owner, c.src, c.readAt, c.last = owner, src, time.Time{}, nil
}

// ClearQueueSource drops owner's source, unless another owner took over since.
func (m *Metrics) ClearQueueSource(owner any) {
	if m == nil {
		return
	}
	c := m.queues
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owner == owner {
		c.owner, c.src, c.last = nil, nil, nil
	}
}
