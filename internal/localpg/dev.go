package localpg

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ModulePath identifies this repository's go.mod.
const ModulePath = "github.com/pgflow-wasm/pgflow-wasm"

// DevDirName is the dev cluster's folder in a checkout (git-ignored).
const DevDirName = ".pgdata"

// DevDatabase is the database `localdb up` creates for `make run`.
const DevDatabase = "pgflow"

// RepoRoot walks up from start to the folder whose go.mod declares this module.
func RepoRoot(start string) (string, error) {
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", err
	}
	for {
		if moduleOf(filepath.Join(dir, "go.mod")) == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside a pgflow-wasm checkout (no go.mod for %s above %s)", ModulePath, start)
		}
		dir = parent
	}
}

func moduleOf(goMod string) string {
	f, err := os.Open(goMod)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module "))
		}
	}
	return ""
}

// Dev is the dev cluster of the checkout at repoRoot: <repoRoot>/.pgdata, with a port
// derived from that path (and stored there), so two checkouts never share a cluster.
func Dev(repoRoot string, logf func(string, ...any)) (*Cluster, error) {
	return New(Config{Dir: filepath.Join(repoRoot, DevDirName), Logf: logf})
}

// EnsureDatabase creates a database in the running cluster unless it exists.
func (c *Cluster) EnsureDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the cluster in %s: %w", c.Dir, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // created meanwhile by another process
		return nil
	}
	return err
}
