package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// checkSchema reads which pgflow the database has (schema.DetectPgflow) and refuses one this
// worker does not speak: never run a flow on a protocol guess.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) (schema.Protocol, error) {
	proto, err := schema.DetectPgflow(ctx, pool)
	if err != nil {
		return proto, err
	}
	return proto, proto.Supported()
}

// loadEffectiveOptions reads each step's timeout and base delay as pgflow applies them (the
// step's option, else the flow's), so timeouts and retry wake-ups match what pgflow does even
// when the file's options were not written (compile without --update-options); and, on
// pgflow 0.17+, which queue each served step's tasks come from. Then it builds each flow's
// queues and their fetchers.
func (w *Worker) loadEffectiveOptions(ctx context.Context) error {
	queueMode := `'flow'`
	if w.pgflow().QueueNames {
		queueMode = `f.queue_mode`
	}
	queueCols := w.pgflow().StepQueue("s") + ", " + queueMode
	for _, fs := range w.flows {
		rows, err := w.cfg.Pool.Query(ctx, `
			select s.step_slug, coalesce(s.opt_timeout, f.opt_timeout), coalesce(s.opt_base_delay, f.opt_base_delay),
			       coalesce(s.opt_max_attempts, f.opt_max_attempts), `+queueCols+`
			from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug where s.flow_slug = $1`, fs.def.Slug)
		if err != nil {
			return fmt.Errorf("reading options of flow %s: %w", fs.def.Slug, err)
		}
		found := 0
		mode := "flow"
		stepQueue := map[string]string{}
		for rows.Next() {
			var slug string
			var timeout, baseDelay, maxAttempts int
			var queue string
			if err := rows.Scan(&slug, &timeout, &baseDelay, &maxAttempts, &queue, &mode); err != nil {
				rows.Close()
				return err
			}
			if st := fs.steps[slug]; st != nil {
				st.timeout = time.Duration(timeout) * time.Second
				st.baseDelay = baseDelay
				st.maxAttempts = maxAttempts
				found++
				stepQueue[slug] = queue
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if found != len(fs.steps) {
			return fmt.Errorf("flow %s is not compiled into this database: run `pgflow-wasm compile` (serve does it first)", fs.def.Slug)
		}
		if fs.def.Split() && mode != "step" {
			return splitFlowError(fs.def, w.pgflow())
		}
		fs.queues = w.queuesOf(fs, mode, stepQueue)
	}
	return nil
}

// queuesOf builds the fetch queues of a flow: its own queue, or (mode "step") the queue of
// each step this worker serves.
func (w *Worker) queuesOf(fs *flowState, mode string, stepQueue map[string]string) []*queueState {
	// A started task's message stays hidden while its handler may run: timeout + 2 s, as
	// pgflow intends. The read gives every message the longest step's visibility, so
	// only messages of shorter steps need a second write (before pgflow 0.15.1, whose
	// start_tasks sets it itself).
	visibility := map[string]int{}
	longest := 0
	for slug, st := range fs.steps {
		visibility[slug] = int(st.timeout/time.Second) + 2
		longest = max(longest, visibility[slug])
	}
	mapSteps := map[string]bool{}
	for _, s := range fs.def.Steps {
		mapSteps[s.Slug] = s.Type == flowfile.StepMap
	}
	fetcher := func(queue, step string, readVT int) *poller.Fetcher {
		f := poller.NewFetcher(w.cfg.Pool, poller.FetcherConfig{
			Flow:           fs.def.Slug,
			Queue:          queue,
			Step:           step,
			QueueNames:     w.pgflow().QueueNames,
			SetsVisibility: w.pgflow().Lifecycle,
			WorkerID:       fs.workerID,
			FlowInput:      w.pgflow().FlowInput,
			MapStep:        func(step string) bool { return mapSteps[step] },
			ReadVT:         readVT,
			Log:            w.log,
			Visibility: func(step string) int {
				if v, ok := visibility[step]; ok {
					return v
				}
				return longest
			},
		})
		f.SetWitness(w.upgrade.newest)
		return f
	}
	if mode != "step" {
		// One queue for the whole flow: every step names it (schema.Protocol.StepQueue).
		var name string
		for _, q := range stepQueue {
			name = q
			break
		}
		q := &queueState{fs: fs, name: name, wake: poller.NewWake(), leaseRetry: leaseRetry()}
		q.fetcher = fetcher(q.name, "", longest)
		return []*queueState{q}
	}
	var queues []*queueState
	for _, s := range fs.def.Served() {
		q := &queueState{fs: fs, name: stepQueue[s.Slug], step: s.Slug, wake: poller.NewWake(), leaseRetry: leaseRetry()}
		q.fetcher = fetcher(q.name, s.Slug, visibility[s.Slug])
		queues = append(queues, q)
	}
	return queues
}

// splitFlowError explains why a flow with external steps cannot be served here: its tasks
// share one queue, and a worker cannot read only its own steps' messages from it.
func splitFlowError(fl *flowfile.Flow, proto schema.Protocol) error {
	var external []string
	for _, s := range fl.Steps {
		if s.External {
			external = append(external, s.Slug)
		}
	}
	if !proto.QueueNames {
		return fmt.Errorf("flow %s has steps served by another worker (external: %s), which needs per-step queues: pgflow 0.17 or newer "+
			"(this database has pgflow %s, where every task of a flow shares one queue and each worker would take the other's tasks)",
			fl.Slug, strings.Join(external, ", "), proto)
	}
	return fmt.Errorf("flow %s has steps served by another worker (external: %s) but the database compiled it with one queue for every step: "+
		"compile it with per-step queues (pgflow's ensure_flow_compiled with queue_mode 'step'; `pgflow-wasm compile` does so for a new flow), "+
		"or drop it while no run is in flight (`pgflow-wasm flow drop %s`) and compile again", fl.Slug, strings.Join(external, ", "), fl.Slug)
}

// prepareSignal turns on insert notifications for every flow queue in notify mode and returns
// the listener; nil in polling mode (or when no queue can notify). A queue that cannot notify
// (no privilege to add the trigger, say) is polled instead, with one warning: the worker
// never refuses to start over how it learns about new tasks.
func (w *Worker) prepareSignal(ctx context.Context) (*poller.Listener, error) {
	if w.cfg.Signal != pgflowtype.SignalNotify {
		return nil, nil
	}
	channels := map[string]poller.Wake{}
	for _, fs := range w.flows {
		for _, q := range fs.queues {
			how, err := poller.EnableInsertNotify(ctx, w.cfg.Pool, q.name)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				w.log.Warn("notify: this queue cannot notify on inserts; polling it instead", "flow", fs.def.Slug, "queue", q.name, "error", err)
				continue
			}
			w.log.Debug("notify: queue inserts notify", "flow", fs.def.Slug, "queue", q.name, "how", how)
			q.notified = true
			channels[schema.InsertChannel(q.name)] = q.wake
		}
	}
	if len(channels) == 0 {
		return nil, nil
	}
	l := poller.NewListener(w.cfg.Pool.Config().ConnConfig.Copy(), channels, w.log)
	w.own = poller.NewOwnNotices()
	l.SkipOwn(w.own)
	return l, nil
}
