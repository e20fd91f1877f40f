package schema

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ExtensionFiles make our layer installable with CREATE EXTENSION: the control file, the
// script of the layer's first version and the update from it to LayerVersion. PostgreSQL
// chains the two scripts for a fresh CREATE EXTENSION and runs the update alone for
// ALTER EXTENSION pgmq UPDATE.
func ExtensionFiles() map[string][]byte {
	control := fmt.Sprintf(`# %s pgmq-compatible SQL API written by pgflow-wasm.
# This is NOT the real pgmq extension: pgflow-wasm installs it only where no real pgmq
# (>= %s) is available, and never overwrites a pgmq.control that lacks this marker.
comment = '%s pgmq-compatible SQL API (not the real pgmq extension)'
default_version = '%s'
relocatable = false
schema = pgmq
superuser = false
`, LayerCommentPrefix, MinPgmqVersion, LayerCommentPrefix, LayerVersion)
	header := "-- " + LayerCommentPrefix + " extension script, version %s\n" +
		`\echo Use "CREATE EXTENSION pgmq" to load this file. \quit` + "\n"
	base := fmt.Sprintf(header, baseLayerVersion) +
		layerBaseSQL() + "\n" +
		"-- Queue metadata is user data: keep it in pg_dump output.\n" +
		"SELECT pg_catalog.pg_extension_config_dump('pgmq.meta', '');\n"
	update := fmt.Sprintf(header, baseLayerVersion+" to "+LayerVersion) + layerUpdateSQL()
	return map[string][]byte{
		"pgmq.control":                       []byte(control),
		"pgmq--" + baseLayerVersion + ".sql": []byte(base),
		"pgmq--" + baseLayerVersion + "--" + LayerVersion + ".sql": []byte(update),
	}
}

// serverExtensionDir finds the folder the server reads extension files from: the
// pg_config view's SHAREDIR (superusers may read it), else `pg_config --sharedir` of a
// local installation of the server's major version.
func serverExtensionDir(ctx context.Context, conn *pgx.Conn) (string, error) {
	var share string
	err := conn.QueryRow(ctx, `SELECT setting FROM pg_catalog.pg_config WHERE name = 'SHAREDIR'`).Scan(&share)
	if err == nil && share != "" {
		return filepath.Join(share, "extension"), nil
	}
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		return "", fmt.Errorf("reading the server version: %w", err)
	}
	major := num / 10000
	candidates := []string{fmt.Sprintf("/usr/lib/postgresql/%d/bin/pg_config", major)}
	if p, err := exec.LookPath("pg_config"); err == nil {
		candidates = append(candidates, p)
	}
	for _, pgConfig := range candidates {
		if _, err := os.Stat(pgConfig); err != nil {
			continue
		}
		out, err := exec.CommandContext(ctx, pgConfig, "--version", "--sharedir").Output()
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "PostgreSQL "+strconv.Itoa(major)) {
			continue
		}
		return filepath.Join(strings.TrimSpace(lines[1]), "extension"), nil
	}
	return "", fmt.Errorf("cannot find the server's extension folder: not a superuser (pg_config view) and no local pg_config for PostgreSQL %d", major)
}

// writeExtensionFiles puts our control and script files into dir. A pgmq.control that is
// not ours is never touched. Files are written beside their final name then renamed, so
// a concurrent reader (another installer, the server) never sees half a file. It returns
// the files it created (not the ones it found or replaced).
func writeExtensionFiles(dir string) (created []string, err error) {
	existing, err := os.ReadFile(filepath.Join(dir, "pgmq.control"))
	switch {
	case err == nil && !bytes.Contains(existing, []byte(LayerCommentPrefix)):
		return nil, fmt.Errorf("%s holds a pgmq.control that is not pgflow-wasm's: left untouched", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, "pgmq.control"), err)
	}
	for name, body := range ExtensionFiles() {
		final := filepath.Join(dir, name)
		old, readErr := os.ReadFile(final)
		if readErr == nil && bytes.Equal(old, body) {
			continue
		}
		tmp := filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d", name, os.Getpid()))
		if err := os.WriteFile(tmp, body, 0o644); err != nil {
			return created, fmt.Errorf("extension folder %s is not writable by this process (uid %d): %w", dir, os.Geteuid(), err)
		}
		if err := os.Chmod(tmp, 0o644); err != nil { // umask must not hide the file from the server
			os.Remove(tmp)
			return created, err
		}
		if err := os.Rename(tmp, final); err != nil {
			os.Remove(tmp)
			return created, fmt.Errorf("installing %s: %w", final, err)
		}
		if readErr != nil {
			created = append(created, final)
		}
	}
	return created, nil
}

// OwnedExtensionDirMarker is a file that marks an extension folder as one pgflow-wasm
// created (the private folder of a cluster started by `pgflow-wasm localdb` or the tests). In
// auto mode the installer writes the layer's extension files only into such a folder; any
// other folder belongs to the machine's PostgreSQL package, where a file of ours would be
// offered to every cluster on the host: there the layer goes into a plain schema, unless
// --pgmq extension asks for the folder explicitly.
const OwnedExtensionDirMarker = "pgflow-wasm-owned"

// OwnedExtensionDirNote is the marker file's content.
const OwnedExtensionDirNote = "This extension folder belongs to a PostgreSQL cluster that pgflow-wasm created;\n" +
	"`pgflow-wasm db install` may add its pgmq layer here. PostgreSQL ignores this file.\n"

// ownedExtensionDir tells whether dir carries the marker.
func ownedExtensionDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, OwnedExtensionDirMarker))
	return err == nil
}
