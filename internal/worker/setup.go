package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
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
// when the file's options were not written (compile without --update-options).
func (w *Worker) loadEffectiveOptions(ctx context.Context) error {
	for _, fs := range w.flows {
		rows, err := w.cfg.Pool.Query(ctx, `
			select s.step_slug, coalesce(s.opt_timeout, f.opt_timeout), coalesce(s.opt_base_delay, f.opt_base_delay)
			from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug where s.flow_slug = $1`, fs.def.Slug)
		if err != nil {
			return fmt.Errorf("reading options of flow %s: %w", fs.def.Slug, err)
		}
		found := 0
		for rows.Next() {
			var slug string
			var timeout, baseDelay int
			if err := rows.Scan(&slug, &timeout, &baseDelay); err != nil {
				rows.Close()
				return err
			}
			if st := fs.steps[slug]; st != nil {
				st.timeout = time.Duration(timeout) * time.Second
				st.baseDelay = baseDelay
				found++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if found != len(fs.steps) {
			return fmt.Errorf("flow %s is not compiled into this database: run `pgflow-wasm compile` (serve does it first)", fs.def.Slug)
		}
		// A started task's message stays hidden while its handler may run: timeout + 2 s, as
		// pgflow intends. The read gives every message the longest step's visibility, so
		// only messages of shorter steps need a second write.
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
		fs.fetcher = poller.NewFetcher(w.cfg.Pool, poller.FetcherConfig{
			Flow:      fs.def.Slug,
			WorkerID:  fs.workerID,
			FlowInput: w.proto.FlowInput,
			MapStep:   func(step string) bool { return mapSteps[step] },
			ReadVT:    longest,
			Visibility: func(step string) int {
				if v, ok := visibility[step]; ok {
					return v
				}
				return longest
			},
		})
	}
	return nil
}

// prepareSignal turns on insert notifications for every flow queue in notify mode and returns
// the listener; nil in polling mode (or when no queue can notify). A queue that cannot notify
// (no privilege to add the trigger, say) is polled instead, with one warning: the worker
// never refuses to start over how it learns about new tasks.
func (w *Worker) prepareSignal(ctx context.Context) (*poller.Listener, error) {
	if w.cfg.Signal != SignalNotify {
		return nil, nil
	}
	channels := map[string]poller.Wake{}
	for _, fs := range w.flows {
		how, err := poller.EnableInsertNotify(ctx, w.cfg.Pool, fs.def.Slug)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			w.log.Warn("notify: this queue cannot notify on inserts; polling it instead", "flow", fs.def.Slug, "error", err)
			continue
		}
		w.log.Debug("notify: queue inserts notify", "flow", fs.def.Slug, "how", how)
		fs.notified = true
		channels[poller.InsertChannel(fs.def.Slug)] = fs.wake
	}
	if len(channels) == 0 {
		return nil, nil
	}
	return poller.NewListener(w.cfg.Pool.Config().ConnConfig.Copy(), channels, w.log), nil
}
