package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// DefaultMigrationsDir is where `npm ci` puts pgflow's migrations, relative to the repository.
const DefaultMigrationsDir = "node_modules/@pgflow/core/dist/supabase/migrations"

// MigrationsDirEnv overrides DefaultMigrationsDir for the CLI.
const MigrationsDirEnv = "PGFLOW_WASM_MIGRATIONS"

// Migration is one of pgflow's SQL files, exactly as shipped.
type Migration struct {
	Name   string // file name; the sort key
	SQL    string
	SHA256 string // hex digest of SQL
}

// Migrations is the content of a migrations folder.
type Migrations struct {
	Dir           string
	Files         []Migration // in file-name order
	PgflowVersion string      // from the enclosing @pgflow/core package.json, "unknown" if none
}

// MissingMigrationsError says the migrations folder is absent and how to get it.
type MissingMigrationsError struct{ Dir string }

func (e *MissingMigrationsError) Error() string {
	return fmt.Sprintf("pgflow migrations folder %s not found: run `npm ci` in the repository (or `make node_modules`), "+
		"or point --migrations / %s at @pgflow/core's dist/supabase/migrations", e.Dir, MigrationsDirEnv)
}

// LoadMigrations reads every *.sql file of dir, sorted by name.
func LoadMigrations(dir string) (*Migrations, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &MissingMigrationsError{Dir: dir}
	}
	if err != nil {
		return nil, fmt.Errorf("reading pgflow migrations folder: %w", err)
	}
	m := &Migrations{Dir: dir, PgflowVersion: pgflowPackageVersion(dir)}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		body, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading pgflow migration: %w", err)
		}
		m.Files = append(m.Files, Migration{Name: e.Name(), SQL: string(body), SHA256: sha256Hex(string(body))})
	}
	if len(m.Files) == 0 {
		return nil, fmt.Errorf("pgflow migrations folder %s holds no .sql files: run `npm ci` in the repository (or `make node_modules`)", dir)
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	return m, nil
}

// Fingerprint identifies the set of files (names and contents).
func (m *Migrations) Fingerprint() string {
	var b strings.Builder
	for _, f := range m.Files {
		b.WriteString(f.Name + " " + f.SHA256 + "\n")
	}
	return sha256Hex(b.String())
}

// pgflowPackageVersion finds the package.json of @pgflow/core above the migrations folder
// (dist/supabase/migrations -> package root) and returns its version.
func pgflowPackageVersion(dir string) string {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "unknown"
	}
	for i := 0; i < 4; i++ {
		d = filepath.Dir(d)
		body, err := os.ReadFile(filepath.Join(d, "package.json"))
		if err != nil {
			continue
		}
		var pkg struct{ Name, Version string }
		if json.Unmarshal(body, &pkg) == nil && pkg.Name == "@pgflow/core" && pkg.Version != "" {
			return pkg.Version
		}
	}
	return "unknown"
}

// createPgmqExtension matches pgflow's one statement that creates the pgmq extension.
var createPgmqExtension = regexp.MustCompile(`(?im)^[ \t]*CREATE[ \t]+EXTENSION[ \t]+IF[ \t]+NOT[ \t]+EXISTS[ \t]+"?pgmq"?[^;]*;`)

// withoutPgmqExtension returns the files with pgflow's CREATE EXTENSION "pgmq" statement
// turned into a comment, for databases whose pgmq is a plain schema (the extension would
// collide with it, or not exist). Exactly one such statement must exist in the whole set.
func (m *Migrations) withoutPgmqExtension() (map[string]string, error) {
	out := map[string]string{}
	found := 0
	for _, f := range m.Files {
		n := len(createPgmqExtension.FindAllStringIndex(f.SQL, -1))
		found += n
		if n > 0 {
			out[f.Name] = createPgmqExtension.ReplaceAllString(f.SQL,
				"-- [pgflow-wasm] skipped: pgmq is installed as a plain schema, not an extension")
		}
	}
	if found != 1 {
		return nil, fmt.Errorf("expected exactly one `CREATE EXTENSION IF NOT EXISTS \"pgmq\"` statement in the pgflow migrations of %s, found %d: "+
			"this pgflow version is not supported with pgmq as a plain schema", m.Dir, found)
	}
	return out, nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
