// Package pgflowsql carries the pinned pgflow release's SQL in the binary: `make` copies
// @pgflow/core's migrations from npm into migrations/ before building (mk/db.mk), and they
// are embedded here, so `db install` needs no checkout and no node_modules. The files are
// generated, never committed: a binary built without make has none, and says so.
package pgflowsql

import (
	"embed"
	"io/fs"
	"strings"
)

//go:embed migrations
var embedded embed.FS

// Migrations returns the embedded migrations folder and the pgflow version it holds; ok is
// false when the binary was built without them.
func Migrations() (dir fs.FS, version string, ok bool) {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		return nil, "", false
	}
	names, _ := fs.Glob(sub, "*.sql")
	if len(names) == 0 {
		return nil, "", false
	}
	v, err := fs.ReadFile(sub, "VERSION")
	if err != nil {
		return sub, "unknown", true
	}
	return sub, strings.TrimSpace(string(v)), true
}
