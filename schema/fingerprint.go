package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// catalogueSQL fingerprints schema pgflow's catalogue: every function, relation (tables,
// indexes, sequences, composite types) and type in it, each by its oid and the version of its
// catalogue row (xmin). A migration that creates, drops, replaces or alters any of them
// changes it; rows changed in place (the statistics VACUUM and ANALYZE keep) do not. It is
// three scans of small catalogues, cheap enough to run every few seconds.
const catalogueSQL = `
with n as (select to_regnamespace('pgflow') as oid)
select coalesce(md5(string_agg(x, ',' order by x)), '') from (
  select 'p' || p.oid || ':' || p.xmin from pg_catalog.pg_proc p, n where p.pronamespace = n.oid
  union all
  select 'c' || c.oid || ':' || c.xmin from pg_catalog.pg_class c, n where c.relnamespace = n.oid
  union all
  select 't' || t.oid || ':' || t.xmin from pg_catalog.pg_type t, n where t.typnamespace = n.oid) f(x)`

// CatalogueFingerprint identifies the state of schema pgflow's functions, relations and
// types: "" when pgflow is not installed. A worker compares it with the one it read at start
// to notice pgflow upgraded under it, whoever applied the migrations.
func CatalogueFingerprint(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var fp string
	if err := q.QueryRow(ctx, catalogueSQL).Scan(&fp); err != nil {
		return "", fmt.Errorf("reading schema pgflow's catalogue: %w", err)
	}
	return fp, nil
}

// NewestMigrationSQL reads the name of the newest migration `db install` applied: each
// migration's transaction holds the upgrade lock (UpgradeLockShared), so inside a
// transaction that holds it shared, the name says which pgflow every statement of that
// transaction meets.
const NewestMigrationSQL = `select coalesce(max(name), '') from pgflow_wasm.schema_migrations`

// NewestMigration is the newest migration `db install` applied (pgflow_wasm.schema_migrations)
// and the pgflow release it came with; "", "" when pgflow was installed otherwise or the
// bookkeeping cannot be read.
func NewestMigration(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (name, release string) {
	err := q.QueryRow(ctx, `select name, pgflow_version from pgflow_wasm.schema_migrations order by name desc limit 1`).Scan(&name, &release)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", ""
	}
	return name, release
}
