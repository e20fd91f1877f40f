package localpg

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// A root `db install` against the machine's own cluster once wrote pgmq files into the
// system extension folder, and every private cluster then offered that foreign pgmq. A private
// folder offers only what a package installed there.
func TestPrivateExtensionFolderOffersOnlyPackagedFiles(t *testing.T) {
	sys, priv := t.TempDir(), t.TempDir()
	for _, f := range []string{"plpgsql.control", "plpgsql--1.0.sql", "pgmq.control", "pgmq--1.5.0.sql"} {
		if err := os.WriteFile(filepath.Join(sys, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	packaged := func(p string) bool {
		return filepath.Base(p) == "plpgsql.control" || filepath.Base(p) == "plpgsql--1.0.sql"
	}
	// A link an earlier version made to the foreign file goes away.
	if err := os.Symlink(filepath.Join(sys, "pgmq.control"), filepath.Join(priv, "pgmq.control")); err != nil {
		t.Fatal(err)
	}
	if err := syncExtensionDir(sys, priv, nil, true, packaged); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{"plpgsql.control": true, "plpgsql--1.0.sql": true, "pgmq.control": false, "pgmq--1.5.0.sql": false,
		schema.OwnedExtensionDirMarker: true} {
		if _, err := os.Stat(filepath.Join(priv, f)); (err == nil) != want {
			t.Errorf("%s in the private folder: %v, want present=%v", f, err, want)
		}
	}
	if err := syncExtensionDir(sys, priv, nil, false, packaged); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(priv, schema.OwnedExtensionDirMarker)); err == nil {
		t.Error("a cluster that stands in for a foreign server keeps the ownership marker")
	}
}

func TestPackagedFilesReadsDpkgLists(t *testing.T) {
	info := t.TempDir()
	old := dpkgInfoDir
	dpkgInfoDir = info
	defer func() { dpkgInfoDir = old }()
	if packagedFiles("/usr/share/postgresql/15/extension") != nil {
		t.Fatal("no package lists, yet a package test")
	}
	list := "/.\n/usr/share/postgresql/15/extension\n/usr/share/postgresql/15/extension/plpgsql.control\n/usr/lib/x\n"
	if err := os.WriteFile(filepath.Join(info, "postgresql-15.list"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := packagedFiles("/usr/share/postgresql/15/extension")
	if ok == nil || !ok("/usr/share/postgresql/15/extension/plpgsql.control") || ok("/usr/share/postgresql/15/extension/pgmq.control") {
		t.Fatal("packagedFiles does not follow the package list")
	}
}
