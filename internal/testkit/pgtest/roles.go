package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Role creates a role for this test, with attributes such as "NOLOGIN" or "LOGIN
// BYPASSRLS", and drops it when the test ends (what it owns or was granted in db first).
// Roles belong to the server, not to a database, so each name is unique: prefix, the
// test process's id and random hex (a later test process drops those of dead ones).
func (db *DB) Role(t testing.TB, prefix, attrs string) string {
	t.Helper()
	var r [3]byte
	rand.Read(r[:])
	name := fmt.Sprintf("%s_r%d_%s", prefix, os.Getpid(), hex.EncodeToString(r[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+ident(name)+" "+attrs); err != nil {
		t.Fatalf("pgtest: creating role %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, db.URL) // db.Pool may be closed by now
		if err != nil {
			return // the server is gone: a later test process drops the role
		}
		defer conn.Close(ctx)
		// Connections of the role (a worker logged in as it) are ended first.
		_, _ = conn.Exec(ctx, `select pg_terminate_backend(pid) from pg_stat_activity where usename = $1`, name)
		_, _ = conn.Exec(ctx, "DROP OWNED BY "+ident(name))
		if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+ident(name)); err != nil {
			t.Logf("pgtest: dropping role %s: %v", name, err)
		}
	})
	return name
}

// URLAs is the database's URL with another user (a LOGIN role of Role; the dev cluster
// trusts local connections).
func (db *DB) URLAs(t testing.TB, user string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil || u.Scheme == "" {
		return db.URL + " user=" + user
	}
	u.User = url.User(user)
	return u.String()
}

// PoolAs is a pool on the database logged in as user, closed when the test ends.
func (db *DB) PoolAs(t testing.TB, user string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, db.URLAs(t, user))
	if err != nil {
		t.Fatalf("pgtest: pool as %s: %v", user, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var orphanRole = regexp.MustCompile(`_r(\d+)_[0-9a-f]{6}$`)

// dropOrphanRoles drops the roles of dead test processes (after their databases).
func (s *server) dropOrphanRoles(ctx context.Context) {
	rows, err := s.admin.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname ~ '_r[0-9]+_[0-9a-f]{6}$'`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		m := orphanRole.FindStringSubmatch(n)
		if m == nil || processAlive(m[1]) {
			continue
		}
		_, _ = s.admin.Exec(ctx, "DROP OWNED BY "+ident(n))
		_, _ = s.admin.Exec(ctx, "DROP ROLE IF EXISTS "+ident(n))
	}
}

// Ledger sets up the application side of the SQL examples and tests in db: schema app
// with the table app.ledger (run_id uuid, task_index int, amount int; no key, so a row
// written twice shows), a role of the test's own that may insert and select there
// (returned), schema secret with a table that role may not read, and app.become(role), a
// function anyone may call that changes the role (what the post-statement check is for).
func (db *DB) Ledger(t testing.TB) string {
	t.Helper()
	role := db.Role(t, "ledger_writer", "LOGIN")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, `
		create schema app;
		create table app.ledger (run_id uuid, task_index int, amount int);
		create schema secret;
		create table secret.keys (k text);
		insert into secret.keys values ('do not read');
		create function app.become(r text) returns text language sql as $$ select set_config('role', r, true) $$;
		grant usage on schema app to `+ident(role)+`;
		grant select, insert on app.ledger to `+ident(role)); err != nil {
		t.Fatalf("pgtest: the ledger schema: %v", err)
	}
	return role
}
