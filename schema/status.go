package schema

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// State is what a database holds of pgflow-wasm's pieces (see Status).
type State struct {
	Server        string // server_version
	Database      string
	Pgmq          Pgmq
	PgmqAvailable AvailablePgmq // what pg_available_extensions offers as pgmq
	Realtime      Realtime
	PgflowSchema  bool     // schema pgflow exists
	PgflowVersion string   // recorded with the last applied migration; "" when none
	Protocol      Protocol // what the catalogue says, whoever installed pgflow
	Migrations    []AppliedMigration
	// RunsIndex is RunsIndex's state when pgflow.runs exists: "present", "invalid" (an
	// interrupted build) or "missing"; "" otherwise.
	RunsIndex string
	// Compared with a migrations folder when Status was given one:
	Pending []string // files not applied yet
	Changed []string // applied files whose content differs now
}

// Status inspects the database conn is connected to. m is optional: when given, State.Pending
// and State.Changed compare its files with the database.
func Status(ctx context.Context, conn *pgx.Conn, m *Migrations) (*State, error) {
	s := &State{}
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_database()`).Scan(&s.Server, &s.Database); err != nil {
		return nil, fmt.Errorf("reading the server identity: %w", err)
	}
	pg, err := readPgmqState(ctx, conn)
	if err != nil {
		return nil, err
	}
	s.Pgmq, s.PgmqAvailable = pg.Installed, pg.Available
	if s.Realtime, err = readRealtime(ctx, conn); err != nil {
		return nil, err
	}
	var bookkeeping bool
	err = conn.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgflow'),
		       to_regclass('pgflow_wasm.schema_migrations') IS NOT NULL`).Scan(&s.PgflowSchema, &bookkeeping)
	if err != nil {
		return nil, fmt.Errorf("inspecting schema pgflow: %w", err)
	}
	if bookkeeping {
		if s.Migrations, err = readApplied(ctx, conn); err != nil {
			return nil, fmt.Errorf("reading pgflow_wasm.schema_migrations: %w", err)
		}
		if n := len(s.Migrations); n > 0 {
			s.PgflowVersion = s.Migrations[n-1].PgflowVersion
		}
	}
	if s.Protocol, err = DetectPgflow(ctx, conn); err != nil {
		return nil, err
	}
	var runs bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('pgflow.runs') IS NOT NULL`).Scan(&runs); err != nil {
		return nil, err
	}
	if runs {
		exists, valid, err := RunsIndexValid(ctx, conn)
		if err != nil {
			return nil, fmt.Errorf("looking for index pgflow.%s: %w", RunsIndex, err)
		}
		s.RunsIndex = map[[2]bool]string{{true, true}: "present", {true, false}: "invalid", {false, false}: "missing"}[[2]bool{exists, valid}]
	}
	if m != nil {
		applied := map[string]string{}
		for _, a := range s.Migrations {
			applied[a.Name] = a.SHA256
		}
		for _, f := range m.Files {
			sum, ok := applied[f.Name]
			switch {
			case !ok:
				s.Pending = append(s.Pending, f.Name)
			case sum != f.SHA256:
				s.Changed = append(s.Changed, f.Name)
			}
		}
	}
	return s, nil
}

// Problems lists what keeps the database from being ready for pgflow-wasm.
func (s *State) Problems() []string {
	var p []string
	if s.Pgmq.Kind == PgmqMissing {
		p = append(p, "pgmq is not installed")
	}
	if s.Realtime.Kind == RealtimeMissing {
		p = append(p, "realtime.send is missing")
	}
	switch {
	case len(s.Migrations) == 0 && !s.Protocol.Installed():
		p = append(p, "no pgflow migration is applied")
	case !s.PgflowSchema:
		p = append(p, "schema pgflow is missing although migrations are recorded")
	case s.Protocol.Supported() != nil:
		p = append(p, s.Protocol.Supported().Error())
	}
	if len(s.Pending) > 0 {
		p = append(p, fmt.Sprintf("%d pgflow migration(s) not applied yet", len(s.Pending)))
	}
	if len(s.Changed) > 0 {
		p = append(p, fmt.Sprintf("%d applied migration file(s) changed since: %v", len(s.Changed), s.Changed))
	}
	return p
}

// Installed reports whether nothing is missing.
func (s *State) Installed() bool { return len(s.Problems()) == 0 }
