package pgflowwasm

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
)

// ErrNoWorkerProcess is returned by DrainWorkerProcess and UndrainWorkerProcess for an id
// that names no pgflow-wasm worker process nor a pgflow.workers row of one.
var ErrNoWorkerProcess = procctl.ErrNotFound

// WorkerProcessChange is what a drain or an undrain did to a worker process.
type WorkerProcessChange struct {
	ProcessID string
	Host      string
	// Changed is false when the process already was drained (drain) or was not (undrain).
	Changed bool
}

// DrainWorkerProcess stops a pgflow-wasm worker process taking new tasks of every flow it
// serves (its running tasks finish, and it stays up) until UndrainWorkerProcess; the process
// reads the flag within its heartbeat interval and keeps it across reloads. id is the
// process's id or the id of any of its pgflow.workers rows; actor is recorded with the action
// in pgflow_wasm.operator_actions.
func DrainWorkerProcess(ctx context.Context, pool *pgxpool.Pool, id, actor string) (WorkerProcessChange, error) {
	c, err := procctl.Drain(ctx, pool, id, actor)
	return WorkerProcessChange{ProcessID: c.ProcessID, Host: c.Host, Changed: c.Changed}, err
}

// UndrainWorkerProcess lets a drained worker process take tasks again.
func UndrainWorkerProcess(ctx context.Context, pool *pgxpool.Pool, id, actor string) (WorkerProcessChange, error) {
	c, err := procctl.Undrain(ctx, pool, id, actor)
	return WorkerProcessChange{ProcessID: c.ProcessID, Host: c.Host, Changed: c.Changed}, err
}
