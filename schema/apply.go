package schema

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AppliedMigration is one row of pgflow_wasm.schema_migrations.
type AppliedMigration struct {
	Name          string
	SHA256        string
	PgflowVersion string
	SkippedPgmq   bool // its CREATE EXTENSION "pgmq" statement was skipped (pgmq as a plain schema)
	// Skipped names every extension whose CREATE EXTENSION statement was skipped (pgmq as a
	// plain schema; pg_net and pg_cron replaced by stand-ins).
	Skipped   []string
	AppliedAt string
}

func readApplied(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]AppliedMigration, error) {
	rows, err := q.Query(ctx, `
		SELECT name, sha256, pgflow_version, skipped_pgmq_create_extension, skipped_extensions,
		       to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
		FROM pgflow_wasm.schema_migrations ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AppliedMigration
	for rows.Next() {
		var m AppliedMigration
		if err := rows.Scan(&m.Name, &m.SHA256, &m.PgflowVersion, &m.SkippedPgmq, &m.Skipped, &m.AppliedAt); err != nil {
			return nil, err
		}
		if m.SkippedPgmq && !slices.Contains(m.Skipped, "pgmq") { // recorded before skipped_extensions existed
			m.Skipped = append([]string{"pgmq"}, m.Skipped...)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// applyMigrations runs every file not yet recorded, each in its own transaction together
// with its bookkeeping row, in file-name order.
func applyMigrations(ctx context.Context, conn *pgx.Conn, m *Migrations, who identity, rep *Report) error {
	if _, err := conn.Exec(ctx, bookkeepingSQL); err != nil {
		return stepError(err, who, "creating schema pgflow_wasm (migration bookkeeping)", createDBPrivilege(who))
	}
	applied, err := readApplied(ctx, conn)
	if err != nil {
		return fmt.Errorf("reading pgflow_wasm.schema_migrations: %w", err)
	}
	recorded := map[string]AppliedMigration{}
	for _, a := range applied {
		recorded[a.Name] = a
	}
	inFolder := map[string]bool{}
	for _, f := range m.Files {
		inFolder[f.Name] = true
		if a, ok := recorded[f.Name]; ok && a.SHA256 != f.SHA256 {
			return fmt.Errorf("pgflow migration %s was applied with sha256 %s (pgflow %s) but the file in %s now has sha256 %s: "+
				"the migrations folder holds a different pgflow than this database; applied migrations are never re-run",
				f.Name, a.SHA256, a.PgflowVersion, m.Dir, f.SHA256)
		}
	}
	var unknown []string
	for name := range recorded {
		if !inFolder[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("this database has pgflow migrations that %s lacks (%v): it was installed from a newer pgflow", m.Dir, unknown)
	}
	if len(recorded) == 0 {
		var pgflowExists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgflow')`).Scan(&pgflowExists); err != nil {
			return err
		}
		if pgflowExists {
			return fmt.Errorf("schema pgflow already exists but pgflow_wasm.schema_migrations records none of its migrations: " +
				"pgflow was installed by another tool (e.g. the Supabase CLI); pgflow-wasm does not re-apply it")
		}
	}

	// Our layer or someone's plain-schema pgmq: pgflow's CREATE EXTENSION "pgmq" must not run;
	// nor those of extensions a stand-in replaces.
	var skip []string
	if rep.Pgmq.Kind == PgmqForeignSchema || (rep.Pgmq.Kind == PgmqLayer && !rep.Pgmq.Extension) {
		skip = append(skip, "pgmq")
	}
	standIns, err := installStandIns(ctx, conn, m, who, rep)
	if err != nil {
		return err
	}
	skip = append(skip, standIns...)
	rewritten, err := m.withoutExtensions(skip)
	if err != nil {
		return err
	}
	for _, f := range m.Files {
		if _, ok := recorded[f.Name]; ok {
			rep.AlreadyApplied++
			continue
		}
		sql := f.SQL
		var skipped []string
		if r, ok := rewritten[f.Name]; ok {
			sql = r
			for _, name := range skip {
				if createExtension(name).MatchString(f.SQL) {
					skipped = append(skipped, name)
				}
			}
		}
		if err := applyOne(ctx, conn, f, sql, skipped, m.PgflowVersion); err != nil {
			return stepError(err, who, "applying pgflow migration "+f.Name, createDBPrivilege(who))
		}
		rep.Applied = append(rep.Applied, f.Name)
	}
	return nil
}

// applyOne applies one migration in a transaction of its own. A deadlock or serialization
// failure (with a session the upgrade lock does not hold off: a run started meanwhile, say)
// rolled it back whole, so it is tried again, a few times.
func applyOne(ctx context.Context, conn *pgx.Conn, f Migration, sql string, skipped []string, version string) error {
	var err error
	for try := 1; ; try++ {
		err = applyOnce(ctx, conn, f, sql, skipped, version)
		var pgErr *pgconn.PgError
		if try == 5 || !errors.As(err, &pgErr) || (pgErr.Code != "40P01" && pgErr.Code != "40001") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
}

func applyOnce(ctx context.Context, conn *pgx.Conn, f Migration, sql string, skipped []string, version string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	// Waits for the workers' transactions in flight; theirs wait for this one.
	if _, err := tx.Exec(ctx, `select pg_catalog.pg_advisory_xact_lock($1)`, LockKeyUpgrade); err != nil {
		return fmt.Errorf("taking the upgrade lock: %w", err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return err
	}
	if skipped == nil {
		skipped = []string{}
	}
	_, err = tx.Exec(ctx, `INSERT INTO pgflow_wasm.schema_migrations (name, sha256, pgflow_version, skipped_pgmq_create_extension, skipped_extensions)
		VALUES ($1, $2, $3, $4, $5)`, f.Name, f.SHA256, version, slices.Contains(skipped, "pgmq"), skipped)
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}
