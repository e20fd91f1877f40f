// Package pgsession opens the worker's dedicated database sessions: connections of their own,
// outside the pool, whose session state (advisory locks, LISTEN) lives exactly as long as
// they do. The liveness lock, fetch leases and the requeue guard each keep one.
package pgsession

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Open connects with the pool's settings, named app in pg_stat_activity's application_name
// so that an operator can tell what each of the worker's sessions is for.
func Open(ctx context.Context, pool *pgxpool.Pool, app string) (*pgx.Conn, error) {
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = app
	return pgx.ConnectConfig(ctx, cfg)
}
