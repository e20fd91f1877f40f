// QueueGeneric makes a transaction's statements reuse their generic plans.
//
// PL/pgSQL keeps each statement's plan for the session, but for its first five calls, and
// afterwards whenever the generic plan's estimated cost is above the custom plans' average,
// it plans the statement again for the parameters of every call. A statement with an array
// parameter never switches: the generic plan assumes an array of unknown length, which always
// looks costlier than the custom plan for the array in hand. The layer's archive
// (`msg_id = ANY($2)`, which pgflow's complete_task calls for every task) and the twin of
// start_tasks (`msg_ids`) were planned at every call, and planning was most of their time
// (docs/RATIONALE.md, "Writes and starts reuse their plans").
//
// The switch is local to a transaction, and leaves alone a session, role or database that
// chose a mode: the worker's reads keep custom plans, where a generic LIMIT estimate chose
// worse ones.

package plans

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// GenericSQL switches the rest of the transaction to generic plans where the mode is the
// default (auto).
const GenericSQL = `select set_config('plan_cache_mode', 'force_generic_plan', true) where current_setting('plan_cache_mode') = 'auto'`

// QueueGeneric queues GenericSQL into b: the statements queued after it, in the same
// transaction, reuse their generic plans.
func QueueGeneric(b *pgx.Batch) {
	b.Queue(GenericSQL).Exec(func(pgconn.CommandTag) error { return nil })
}
