// Package fetched holds the task a fetch started: what the poller hands the worker and the
// worker hands the completer, in a leaf of its own so that neither imports the other for it.
package fetched

import (
	"encoding/json"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// Task is one started pgflow task, ready to run.
type Task struct {
	FlowSlug  string
	RunID     string
	StepSlug  string
	TaskIndex int
	MsgID     int64
	// Attempt is 1 on the first try; pgflow counts it in step_tasks.attempts_count.
	Attempt int
	// Input is the handler input exactly as pgflow built it.
	Input json.RawMessage
	// FlowInput is the run's input; map steps see only their element in Input.
	FlowInput json.RawMessage
	// StartedAt is when start_tasks returned, for durations and logs.
	StartedAt time.Time
	// ClaimSent is when start_tasks was sent, the read already back (a hop ends there:
	// pgflow's started_at is the fetch transaction's start, before the read).
	ClaimSent time.Time
	// Moments are taken only for the TaskWritten hook; nil without it.
	Moments *pgflowtype.TaskMoments
	// QueueWait is how long the task's message had been in its queue when the read took it
	// (since its enqueue: a retry's message keeps its first enqueue time).
	QueueWait time.Duration
	// WorkerID is the pgflow.workers row that started the task (step_tasks.last_worker_id):
	// with Attempt it names this one attempt, and every outcome write is guarded by both.
	WorkerID string
}
