package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// RealtimeKind says whose realtime.send a database has.
type RealtimeKind string

const (
	RealtimeMissing RealtimeKind = "missing"
	RealtimeOurs    RealtimeKind = "ours"    // pgflow-wasm's NOTIFY version
	RealtimeForeign RealtimeKind = "foreign" // Supabase's, or anyone else's: never replaced
)

// Realtime describes realtime.send(jsonb, text, text, boolean).
type Realtime struct {
	Kind    RealtimeKind
	Version string // ours only
}

func (r Realtime) String() string {
	switch r.Kind {
	case RealtimeOurs:
		if r.Version == "1" {
			return "realtime.send (pgflow-wasm's, version 1: NOTIFY on channel pgflow:run:<run_id>, for every event; db install updates it)"
		}
		return fmt.Sprintf("realtime.send (pgflow-wasm's, version %s: NOTIFY on channel pgflow:run:<run_id> while someone listens)", r.Version)
	case RealtimeForeign:
		return "realtime.send (not pgflow-wasm's, e.g. Supabase Realtime)"
	}
	return "realtime.send missing"
}

// RunChannel is the NOTIFY channel our realtime.send uses for a run's events.
func RunChannel(runID string) string { return "pgflow:run:" + runID }

// Execer is a connection that runs statements: *pgx.Conn, *pgxpool.Conn, a pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ListenEvents LISTENs on a realtime.send channel and registers the session as its
// listener: our realtime.send (version 2 on) NOTIFYs only registered channels, so a bare
// LISTEN hears nothing. Where realtime.send is not ours, or older, it is a plain LISTEN.
// Read what the channel is about after it returns: events of transactions that were
// already committing may not be sent.
func ListenEvents(ctx context.Context, conn Execer, channel string) error {
	_, err := conn.Exec(ctx, `select realtime.pgflow_wasm_listen($1)`, channel)
	if err == nil || !noListenerRegistry(err) {
		return err
	}
	_, err = conn.Exec(ctx, "listen "+pgx.Identifier{channel}.Sanitize())
	return err
}

// ListenRunEnd is ListenEvents for a session that waits only for the run's end: our
// realtime.send (version 3 on) then NOTIFYs it run:completed and run:failed, and no step's
// events, so the run's other transactions commit without the lock a NOTIFY takes (older
// ones NOTIFY every event, as for ListenEvents).
func ListenRunEnd(ctx context.Context, conn Execer, channel string) error {
	_, err := conn.Exec(ctx, `select realtime.pgflow_wasm_listen($1, true)`, channel)
	if err == nil || !noListenerRegistry(err) {
		return err
	}
	return ListenEvents(ctx, conn, channel)
}

// UnlistenEvents stops listening on channel, or on every channel when it is "".
func UnlistenEvents(ctx context.Context, conn Execer, channel string) error {
	var err error
	if channel == "" {
		_, err = conn.Exec(ctx, `select realtime.pgflow_wasm_unlisten()`)
	} else {
		_, err = conn.Exec(ctx, `select realtime.pgflow_wasm_unlisten($1)`, channel)
	}
	if err == nil || !noListenerRegistry(err) {
		return err
	}
	if channel == "" {
		_, err = conn.Exec(ctx, "unlisten *")
	} else {
		_, err = conn.Exec(ctx, "unlisten "+pgx.Identifier{channel}.Sanitize())
	}
	return err
}

// noListenerRegistry reports an error saying the database has no listener registry: no
// schema realtime, or a realtime.send that is not ours or older than version 2.
func noListenerRegistry(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "3F000")
}

func readRealtime(ctx context.Context, conn *pgx.Conn) (Realtime, error) {
	var exists bool
	var comment *string
	err := conn.QueryRow(ctx, `
		SELECT p IS NOT NULL, obj_description(p, 'pg_proc')
		FROM to_regprocedure('realtime.send(jsonb,text,text,boolean)') AS p`).Scan(&exists, &comment)
	if err != nil {
		return Realtime{}, fmt.Errorf("inspecting realtime.send: %w", err)
	}
	switch {
	case !exists:
		return Realtime{Kind: RealtimeMissing}, nil
	case comment != nil && strings.HasPrefix(*comment, realtimeCommentPrefix+" "):
		rest := strings.TrimPrefix(*comment, realtimeCommentPrefix+" ")
		version, _, _ := strings.Cut(rest, ":")
		return Realtime{Kind: RealtimeOurs, Version: version}, nil
	}
	return Realtime{Kind: RealtimeForeign}, nil
}

// installRealtime creates our realtime.send where there is none and refreshes an older one
// of ours; anyone else's is kept. It must run before the migrations: pgflow's SQL-language
// functions that call it are checked when they are created.
func installRealtime(ctx context.Context, conn *pgx.Conn, who identity, rep *Report) error {
	rt, err := readRealtime(ctx, conn)
	if err != nil {
		return err
	}
	switch {
	case rt.Kind == RealtimeForeign, rt.Kind == RealtimeOurs && rt.Version == RealtimeVersion:
		rep.Realtime, rep.RealtimeAction = rt, "kept"
		return nil
	case rt.Kind == RealtimeOurs:
		rep.RealtimeAction = "updated"
	default:
		rep.RealtimeAction = "installed"
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, realtimeSQL()); err != nil {
		return stepError(err, who, "installing realtime.send", createDBPrivilege(who))
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	rep.Realtime = Realtime{Kind: RealtimeOurs, Version: RealtimeVersion}
	return nil
}
