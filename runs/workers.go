package runs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LiveAfter is how recent a worker's heartbeat must be for it to count as serving: a
// pgflow-wasm worker beats every 2 s by default and is declared dead after 30 s of silence.
const LiveAfter = 30 * time.Second

// Workers is what pgflow.workers says about the workers of one flow's queue.
type Workers struct {
	FlowExists bool
	// Live counts workers with a heartbeat within LiveAfter that were not deprecated.
	Live int
	// LastHeartbeat is the newest heartbeat of any worker that was not deprecated, if any.
	LastHeartbeat *time.Time
}

// FlowWorkers reads who serves flow: pgflow.workers rows for its queue (the queue is named
// after the flow) with no deprecated_at.
func FlowWorkers(ctx context.Context, pool *pgxpool.Pool, flow string) (Workers, error) {
	var w Workers
	err := pool.QueryRow(ctx, `
		select exists (select 1 from pgflow.flows where flow_slug = $1),
		       count(*) filter (where last_heartbeat_at > now() - make_interval(secs => $2)),
		       max(last_heartbeat_at)
		from pgflow.workers where queue_name = $1 and deprecated_at is null`,
		flow, LiveAfter.Seconds()).Scan(&w.FlowExists, &w.Live, &w.LastHeartbeat)
	if err != nil {
		return w, fmt.Errorf("reading the workers of flow %s: %w", flow, err)
	}
	return w, nil
}

// NoWorkerWarning says why a run of flow will not move, or "" when a live worker serves it
// (or the flow does not exist, which starting the run reports).
func (w Workers) NoWorkerWarning(flow string) string {
	if !w.FlowExists || w.Live > 0 {
		return ""
	}
	last := "no worker has ever served it"
	if w.LastHeartbeat != nil {
		last = fmt.Sprintf("the last heartbeat of a worker for it was %s ago", time.Since(*w.LastHeartbeat).Round(time.Second))
	}
	return fmt.Sprintf("no live worker serves flow %s (%s): the run waits in its queue until one starts, e.g. "+
		"`pgflow-wasm serve --flows <the flows.yaml that declares %s>`", flow, last, flow)
}
