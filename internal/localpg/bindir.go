package localpg

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// BinDirEnv names a folder holding postgres, initdb and pg_ctl, overriding the search.
const BinDirEnv = "PGFLOW_WASM_PG_BINDIR"

// MinMajor is the oldest PostgreSQL this project supports.
const MinMajor = 14

// FindBinDir returns the folder of the newest PostgreSQL server (major >= MinMajor):
// $PGFLOW_WASM_PG_BINDIR, else Debian's /usr/lib/postgresql/<major>/bin, else the bindir
// of the pg_config on PATH.
func FindBinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		if _, err := serverMajor(dir); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinDirEnv, dir, err)
		}
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	type candidate struct {
		dir   string
		major int
	}
	var cands []candidate
	for _, p := range found {
		major, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		if err == nil && major >= MinMajor {
			cands = append(cands, candidate{filepath.Dir(p), major})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].major > cands[j].major })
	if len(cands) > 0 {
		return cands[0].dir, nil
	}
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pgConfig, "--bindir").Output(); err == nil {
			dir := strings.TrimSpace(string(out))
			if major, err := serverMajor(dir); err == nil && major >= MinMajor {
				return dir, nil
			}
		}
	}
	return "", fmt.Errorf("no PostgreSQL %d+ server found (looked in /usr/lib/postgresql/*/bin and pg_config --bindir): "+
		"install one (`make postgres-server` runs apt-get install postgresql-15) or set %s", MinMajor, BinDirEnv)
}

var versionRe = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

var fullVersionRe = regexp.MustCompile(`\(PostgreSQL\) (\d+(\.\d+)?)`)

// binaryVersion is the "15.20" of `postgres --version` in dir ("" if unreadable).
func binaryVersion(dir string) string {
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return ""
	}
	if m := fullVersionRe.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// serverMajor runs `postgres --version` in dir and returns the major version.
func serverMajor(dir string) (int, error) {
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("no usable postgres in %s: %w", dir, err)
	}
	m := versionRe.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("cannot read the version of %s/postgres from %q", dir, strings.TrimSpace(string(out)))
	}
	major, _ := strconv.Atoi(string(m[1]))
	if major < MinMajor {
		return major, fmt.Errorf("PostgreSQL %d in %s is too old: %d or newer is needed", major, dir, MinMajor)
	}
	return major, nil
}
