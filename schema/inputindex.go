package schema

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// InputIndex lets the dashboard find runs by a field of their input (`input.customer =
// cus_42`): a GIN index with the jsonb_path_ops operator class on pgflow.runs.input, which
// serves containment queries (input @> '{"customer": "cus_42"}') and nothing else. It is
// smaller and faster to update than the default jsonb_ops class, which would also serve key
// existence (?) queries the search never asks. Every start_flow then writes one more index
// entry per input value (docs/dashboard.md says what that costs): `db install` creates it,
// the dashboard never does on its own.
const InputIndex = "pgflow_wasm_runs_input_idx"

// InputIndexSQL creates InputIndex without blocking writers.
const InputIndexSQL = "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + InputIndex + " ON pgflow.runs USING gin (input jsonb_path_ops)"

// InputIndexValid reports whether InputIndex exists and is usable.
func InputIndexValid(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (exists, valid bool, err error) {
	return indexValid(ctx, q, InputIndex)
}

// EnsureInputIndex creates InputIndex when it is missing (or rebuilds an invalid one), as
// EnsureRunsIndex does RunsIndex; conn must not be inside a transaction.
func EnsureInputIndex(ctx context.Context, conn *pgx.Conn) (RunsIndexState, error) {
	return ensureIndex(ctx, conn, InputIndex, InputIndexSQL)
}
