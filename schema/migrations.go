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
	"sort"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/schema/pgflowsql"
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
	return fmt.Sprintf("pgflow migrations folder %s not found: give --migrations (or %s) the folder of pgflow's migrations, "+
		"or leave it out to install the pgflow built into this binary", e.Dir, MigrationsDirEnv)
}

// BuiltIn names the migrations embedded in the binary (package pgflowsql): the pinned
// @pgflow/core release, copied from npm at build time.
const BuiltIn = ""

// LoadMigrations reads every *.sql file of dir, sorted by name; dir BuiltIn reads the
// migrations embedded in the binary.
func LoadMigrations(dir string) (*Migrations, error) {
	if dir == BuiltIn {
		fsys, version, ok := pgflowsql.Migrations()
		if !ok {
			return nil, errors.New("this pgflow-wasm binary was built without pgflow's SQL: build it with `make build` " +
				"(which copies @pgflow/core's migrations from npm into it), or give --migrations DIR")
		}
		m, err := loadMigrations(fsys, "(built in: @pgflow/core "+version+")")
		if m != nil {
			m.PgflowVersion = version
		}
		return m, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, &MissingMigrationsError{Dir: dir}
	}
	m, err := loadMigrations(os.DirFS(dir), dir)
	if m == nil {
		return nil, err
	}
	m.PgflowVersion = pgflowPackageVersion(dir)
	if m.PgflowVersion == "unknown" {
		m.PgflowVersion = releaseOf(m.Files[len(m.Files)-1].Name)
	}
	return m, err
}

// loadMigrations reads the *.sql files of fsys; dir names it in messages.
func loadMigrations(fsys fs.FS, dir string) (*Migrations, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading pgflow migrations folder: %w", err)
	}
	m := &Migrations{Dir: dir}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading pgflow migration: %w", err)
		}
		m.Files = append(m.Files, Migration{Name: e.Name(), SQL: string(body), SHA256: sha256Hex(string(body))})
	}
	if len(m.Files) == 0 {
		return nil, fmt.Errorf("pgflow migrations folder %s holds no .sql files: give the folder of pgflow's migrations (its pkgs/core/supabase/migrations, or the copy in your supabase/migrations)", dir)
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

// releaseByLastMigration names the pgflow release a folder holds from its newest migration
// (a folder copied out of pgflow's repository, or pgflow's installer wrote into a project's
// supabase/migrations, has no package.json). Facts from pgflow's release history: 0.9.x added
// no migration to 0.8.1's, 0.13.0 was withdrawn, 0.14.0 and 0.14.1 ship the same SQL.
var releaseByLastMigration = map[string]string{
	"20251104080523": "0.8.1",
	"20251130000000": "0.10.0 (auto compilation only)",
	"20251209074533": "0.10.0",
	"20251212100113": "0.11.0",
	"20251225163110": "0.12.0",
	"20260103145141": "0.13.1",
	"20260120205547": "0.13.2",
	"20260124113408": "0.13.3",
	"20260214181656": "0.14.1",
	"20260607175525": "0.15.0",
	"20260904095427": "0.15.1",
	"20260907082520": "0.16.0",
	"20260915074120": "0.17.0",
	"20260919152659": "main (2026-09-19)",
	"20260920093533": "main (2026-09-20)",
	"20261001194538": "main (2026-10-01)",
}

func releaseOf(lastMigration string) string {
	if v, ok := releaseByLastMigration[strings.SplitN(lastMigration, "_", 2)[0]]; ok {
		return v
	}
	return "unknown (newest migration " + lastMigration + ")"
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

// withoutExtensions returns the files with pgflow's CREATE EXTENSION statements for names
// turned into comments: for a pgmq that is a plain schema (the extension would collide with
// it, or not exist), and for the stand-ins of pg_net and pg_cron. Exactly one such statement
// per name must exist in the whole set: a pgflow that changes this stops with a clear error.
func (m *Migrations) withoutExtensions(names []string) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range names {
		re := createExtension(name)
		found := 0
		for _, f := range m.Files {
			sql, ok := out[f.Name]
			if !ok {
				sql = f.SQL
			}
			n := len(re.FindAllStringIndex(sql, -1))
			found += n
			if n > 0 {
				out[f.Name] = re.ReplaceAllString(sql, "-- [pgflow-wasm] skipped: "+skipReason(name))
			}
		}
		if found != 1 {
			return nil, fmt.Errorf("expected exactly one `CREATE EXTENSION IF NOT EXISTS \"%s\"` statement in the pgflow migrations of %s, found %d: "+
				"this pgflow version is not supported without the %s extension", name, m.Dir, found, name)
		}
	}
	return out, nil
}

func skipReason(name string) string {
	if name == "pgmq" {
		return "pgmq is installed as a plain schema, not an extension"
	}
	return "a pgflow-wasm stand-in for " + name + " is installed instead"
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
