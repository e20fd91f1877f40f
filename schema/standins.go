package schema

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// From 0.10 on, pgflow's migrations run CREATE EXTENSION "pg_net" and "pg_cron", read
// vault.decrypted_secrets in function bodies and schedule two pg_cron jobs: Supabase's
// extensions, absent from plain PostgreSQL. Where the database or server has the real one
// (pg_cron only when it is preloaded for this database), it is used. Otherwise an inert
// stand-in of our own (sql/standins.sql) is put in its place and the migration's CREATE
// EXTENSION statement for it is skipped, as the pgmq one is for a plain-schema pgmq.

//go:embed sql/standins.sql
var standInsSQL string

// StandIn says what became of one extension the migrations need.
type StandIn struct {
	Name   string // "pg_net", "pg_cron" or "vault"
	Action string // "installed" (our stand-in), "kept" (our stand-in, installed before), "real"
	Note   string // what follows from it
}

func (s StandIn) String() string {
	if s.Note == "" {
		return s.Name + ": " + s.Action
	}
	return s.Name + ": " + s.Action + " (" + s.Note + ")"
}

// standInNotes say what each stand-in means for a user.
var standInNotes = map[string]string{
	"pg_net":  "inert stand-in: net.http_post sends nothing; pgflow's ensure_workers only wakes Supabase Edge Functions",
	"pg_cron": "inert stand-in: pgflow's cron jobs are recorded in cron.job and never run, so upstream's requeue_stalled_tasks never runs; pgflow-wasm's stalled-task sweep is the recovery and applies its rule to other workers' tasks",
	"vault":   "inert stand-in: vault.decrypted_secrets holds no secret",
}

// createExtension matches a migration's CREATE EXTENSION IF NOT EXISTS statement for name.
func createExtension(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?im)^[ \t]*CREATE[ \t]+EXTENSION[ \t]+IF[ \t]+NOT[ \t]+EXISTS[ \t]+"?` + regexp.QuoteMeta(name) + `"?[^;]*;`)
}

// neededStandIns lists what of pg_net, pg_cron and vault the migrations use.
func neededStandIns(m *Migrations) []string {
	var need []string
	for _, name := range []string{"pg_net", "pg_cron"} {
		re := createExtension(name)
		for _, f := range m.Files {
			if re.MatchString(f.SQL) {
				need = append(need, name)
				break
			}
		}
	}
	for _, f := range m.Files {
		if strings.Contains(f.SQL, "vault.decrypted_secrets") {
			return append(need, "vault")
		}
	}
	return need
}

// standInSection returns the part of standins.sql for name.
func standInSection(name string) string {
	marker := "-- {{SECTION " + name + "}}"
	i := strings.Index(standInsSQL, marker)
	if i < 0 {
		panic("standins.sql has no section " + name)
	}
	rest := standInsSQL[i+len(marker):]
	if j := strings.Index(rest, "-- {{SECTION "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// installStandIns puts in what the migrations need and the database lacks, and returns the
// extensions whose CREATE EXTENSION statements must be skipped (a stand-in takes their place).
func installStandIns(ctx context.Context, conn *pgx.Conn, m *Migrations, who identity, rep *Report) (skip []string, err error) {
	for _, name := range neededStandIns(m) {
		s, err := standInState(ctx, conn, name)
		if err != nil {
			return nil, err
		}
		switch s.Action {
		case "installed":
			tx, err := conn.Begin(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, standInSection(name)); err != nil {
				tx.Rollback(ctx)
				return nil, stepError(err, who, "installing the pgflow-wasm stand-in for "+name, createDBPrivilege(who))
			}
			if err := tx.Commit(ctx); err != nil {
				return nil, err
			}
			fallthrough
		case "kept":
			if name != "vault" {
				skip = append(skip, name)
			}
		}
		rep.StandIns = append(rep.StandIns, s)
	}
	return skip, nil
}

// standInState decides what to do about one needed extension.
func standInState(ctx context.Context, conn *pgx.Conn, name string) (StandIn, error) {
	s := StandIn{Name: name}
	var installed, ours, offered, usable bool
	var offeredVersion string
	var err error
	switch name {
	case "vault":
		err = conn.QueryRow(ctx, `SELECT to_regclass('vault.decrypted_secrets') IS NOT NULL,
			to_regproc('vault.pgflow_wasm_standin') IS NOT NULL, false, false, ''`).Scan(&installed, &ours, &offered, &usable, &offeredVersion)
	default:
		schemaName := map[string]string{"pg_net": "net", "pg_cron": "cron"}[name]
		err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = $1),
			to_regproc($2 || '.pgflow_wasm_standin') IS NOT NULL,
			EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions WHERE name = $1),
			$1 <> 'pg_cron' OR (
			  'pg_cron' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))
			  AND coalesce(current_setting('cron.database_name', true), 'postgres') = current_database()),
			coalesce((SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = $1), '')`,
			name, schemaName).Scan(&installed, &ours, &offered, &usable, &offeredVersion)
	}
	if err != nil {
		return s, fmt.Errorf("inspecting %s: %w", name, err)
	}
	switch {
	case ours:
		s.Action, s.Note = "kept", standInNotes[name]
	case installed:
		s.Action = "real"
	case offered && name == "pg_cron" && !atLeast(offeredVersion, "1.5"):
		// pgflow schedules a job every second; pg_cron takes seconds from 1.5 on.
		s.Action = "installed"
		s.Note = standInNotes[name] + "; the server offers pg_cron " + offeredVersion + ", but pgflow's jobs run every few seconds, which needs pg_cron 1.5 or newer"
	case offered && usable:
		s.Action, s.Note = "real", "the server offers it: the migration creates it"
	case offered:
		s.Action = "installed"
		s.Note = standInNotes[name] + "; the server offers pg_cron, but it is not in shared_preload_libraries with cron.database_name = this database"
	default:
		s.Action, s.Note = "installed", standInNotes[name]
	}
	return s, nil
}

// atLeast compares dotted versions ("1.4-1" < "1.5"); an unreadable one is not at least.
func atLeast(v, min string) bool {
	ok, parsed := versionAtLeast(v, min)
	return parsed && ok
}
