package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// skipError makes NewDB skip the test rather than fail it (an install mode this server
// cannot offer).
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

// template returns the name of a template database holding a full install in the given
// mode, building it unless a previous process did. The name carries a hash of everything
// installed, so a changed layer or pgflow version gets a new template.
func (s *server) template(mode schema.LayerMode, aged bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := templateKey{mode, aged}
	if name, ok := s.templates[key]; ok {
		return name, nil
	}
	m, err := schema.LoadMigrations(s.migrations)
	if err != nil {
		return "", err
	}
	// The kind names the pgflow release too (its last migration's timestamp): a run may test
	// two releases at once, and each drops only stale templates of its own kind.
	kind := key.kind() + "_" + strings.SplitN(m.Files[len(m.Files)-1].Name, "_", 2)[0]
	name := fmt.Sprintf("pgfw_tpl_%s_%s", kind, schemaHash(m, kind)[:16])
	if err := s.buildTemplate(name, kind, key); err != nil {
		return "", err
	}
	s.templates[key] = name
	return name, nil
}

// templateKey names a template's variant: the pgmq install mode, and whether it is aged.
type templateKey struct {
	layer schema.LayerMode
	aged  bool
}

func (k templateKey) kind() string {
	kind := string(k.layer)
	if k.aged {
		kind += "_aged"
	}
	return kind
}

// schemaHash covers everything a template holds, so a change to any of it builds a new one.
func schemaHash(m *schema.Migrations, kind string) string {
	return sha256Hex(schema.Fingerprint() + "\x00" + m.Fingerprint() + "\x00" + kind + "\x00" + auditSQL + "\x00" + warmVersion)
}

// buildTemplate builds under an advisory lock (processes of one `go test ./...` run race
// for it), in a scratch database renamed into place only when complete, so a template
// that exists is always whole.
func (s *server) buildTemplate(name, kind string, key templateKey) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, name); err != nil {
		return fmt.Errorf("locking template %s: %w", name, err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext($1))`, name)

	if s.local {
		s.dropStaleTemplates(ctx, conn.Conn(), kind, name)
	}
	var ready bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)`, name).Scan(&ready)
	if err != nil || ready {
		return err
	}
	scratch := name + "_build"
	for _, stmt := range []string{
		"DROP DATABASE IF EXISTS " + ident(name) + " WITH (FORCE)", // a half-made one from a crash
		"DROP DATABASE IF EXISTS " + ident(scratch) + " WITH (FORCE)",
		"CREATE DATABASE " + ident(scratch),
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("building template %s: %s: %w", name, stmt, err)
		}
	}
	if err := s.install(ctx, scratch, key); err != nil {
		conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(scratch)+" WITH (FORCE)")
		return err
	}
	for _, stmt := range []string{
		"ALTER DATABASE " + ident(scratch) + " RENAME TO " + ident(name),
		// No connections: CREATE DATABASE ... TEMPLATE fails while anyone is connected.
		"ALTER DATABASE " + ident(name) + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("building template %s: %s: %w", name, stmt, err)
		}
	}
	return nil
}

func (s *server) install(ctx context.Context, db string, key templateKey) error {
	conn, err := pgx.Connect(ctx, s.dbURL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	mode := key.layer
	_, err = schema.Install(ctx, conn, schema.Options{MigrationsDir: s.migrations, Layer: mode})
	var missing *schema.MissingMigrationsError
	switch {
	case errors.As(err, &missing):
		return err
	case err != nil && mode == schema.LayerExtension && !s.local:
		return &skipError{reason: "pgtest: this server cannot take the pgmq layer as an extension: " + err.Error()}
	case err != nil:
		return fmt.Errorf("installing into template %s: %w", db, err)
	}
	var modes []string
	if key.aged {
		modes = []string{PlanAged}
	}
	return prepare(ctx, conn, modes)
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// dropStaleTemplates removes this kind's templates built from other schema versions (an
// edited layer or another pgflow), so the dev cluster does not collect them. A test process
// of an older checkout cloning one right now would fail; the dev cluster is per checkout.
func (s *server) dropStaleTemplates(ctx context.Context, conn *pgx.Conn, kind, keep string) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datistemplate AND datname ~ $1 AND datname <> $2`,
		"^pgfw_tpl_"+regexp.QuoteMeta(kind)+"_[0-9a-f]{16}$", keep)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		conn.Exec(ctx, "ALTER DATABASE "+ident(n)+" WITH IS_TEMPLATE false")
		conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(n)+" WITH (FORCE)")
	}
}
