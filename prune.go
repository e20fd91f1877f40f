package pgflowwasm

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/retention"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// ErrPruneBusy is returned by Prune when another process is pruning the database now.
var ErrPruneBusy = errors.New("pgflowwasm: another process is pruning this database now")

// Prune deletes finished runs older than opts.OlderThan with everything kept about them
// (docs/operations.md, "Retention"), in short transactions that leave running runs and the
// workers serving them alone. One process prunes a database at a time.
func Prune(ctx context.Context, pool *pgxpool.Pool, opts pgflowtype.PruneOptions) (pgflowtype.Pruned, error) {
	c, ran, err := retention.PruneOnce(ctx, pool, opts)
	if err == nil && !ran {
		err = ErrPruneBusy
	}
	return c, err
}

// PruneCount says what Prune would delete now, deleting nothing.
func PruneCount(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration) (pgflowtype.Pruned, error) {
	return retention.Count(ctx, pool, olderThan)
}

// ParseAge reads an age such as 30d, 12h or 90m (pgflowtype.PruneOptions.OlderThan).
func ParseAge(s string) (time.Duration, error) { return retention.ParseAge(s) }
