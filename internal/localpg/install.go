package localpg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// A cluster runs from a private installation: the server binaries linked (or copied) into
// <dir>/install with the same relative layout as the system's, so PostgreSQL (which finds
// its share and lib folders relative to its own executable) reads a private share folder.
// Its extension folder holds links to the system's extension files that a package installed
// (files another program dropped into the system folder, such as a foreign pgmq.control, are
// not offered), files of our own, and a marker (schema.OwnedExtensionDirMarker) that lets
// `pgflow-wasm db install` add the pgmq layer there, never into a folder it does not own.
// Tests can add fixture extensions to one cluster only.

// layout is where a PostgreSQL installation keeps what the server reads.
type layout struct {
	bin, share, pkglib string
}

var serverBinaries = []string{"postgres", "initdb", "pg_ctl"}

// systemLayout asks the installation's pg_config; without one it assumes Debian's.
func systemLayout(binDir string, major int) (layout, error) {
	out, err := exec.Command(filepath.Join(binDir, "pg_config"), "--bindir", "--sharedir", "--pkglibdir").Output()
	if err == nil {
		f := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(f) == 3 {
			return layout{bin: f[0], share: f[1], pkglib: f[2]}, nil
		}
	}
	l := layout{
		bin:    binDir,
		share:  fmt.Sprintf("/usr/share/postgresql/%d", major),
		pkglib: filepath.Join(filepath.Dir(binDir), "lib"),
	}
	if _, err := os.Stat(filepath.Join(l.share, "postgres.bki")); err != nil {
		return layout{}, fmt.Errorf("cannot find the share folder of the PostgreSQL in %s (no pg_config, no %s)", binDir, l.share)
	}
	return l, nil
}

// privateLayout maps the system layout under root, keeping the paths relative to the
// deepest folder they share (PostgreSQL's own relocation rule).
func privateLayout(sys layout, root string) (layout, error) {
	prefix := commonDir(sys.bin, sys.share, sys.pkglib)
	rel := func(p string) (string, error) {
		r, err := filepath.Rel(prefix, p)
		if err != nil || strings.HasPrefix(r, "..") {
			return "", fmt.Errorf("cannot relocate %s below %s", p, prefix)
		}
		return filepath.Join(root, r), nil
	}
	var l layout
	var err error
	if l.bin, err = rel(sys.bin); err != nil {
		return l, err
	}
	if l.share, err = rel(sys.share); err != nil {
		return l, err
	}
	l.pkglib, err = rel(sys.pkglib)
	return l, err
}

func commonDir(paths ...string) string {
	parts := strings.Split(filepath.Clean(paths[0]), string(filepath.Separator))
	for _, p := range paths[1:] {
		other := strings.Split(filepath.Clean(p), string(filepath.Separator))
		n := 0
		for n < len(parts) && n < len(other) && parts[n] == other[n] {
			n++
		}
		parts = parts[:n]
	}
	if len(parts) <= 1 {
		return "/"
	}
	return strings.Join(parts, string(filepath.Separator))
}

// syncInstall creates or refreshes the private installation. Safe to repeat: binaries are
// replaced when the system's changed, links follow the system's share folder, and regular
// files in the extension folder (ours, or fixtures) are left alone.
func syncInstall(sys, priv layout, extra map[string][]byte, owned bool) error {
	for _, d := range []string{priv.bin, priv.share, filepath.Dir(priv.pkglib)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, name := range serverBinaries {
		if err := linkOrCopy(filepath.Join(sys.bin, name), filepath.Join(priv.bin, name)); err != nil {
			return err
		}
	}
	if err := ensureSymlink(sys.pkglib, priv.pkglib); err != nil {
		return err
	}
	entries, err := os.ReadDir(sys.share)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "extension" {
			continue
		}
		if err := ensureSymlink(filepath.Join(sys.share, e.Name()), filepath.Join(priv.share, e.Name())); err != nil {
			return err
		}
	}
	sysExt := filepath.Join(sys.share, "extension")
	return syncExtensionDir(sysExt, filepath.Join(priv.share, "extension"), extra, owned, packagedFiles(sysExt))
}

// syncExtensionDir links the system's extension files into the private folder. packaged
// tells which system files a package installed; nil means every file (no package database).
// owned writes the marker that makes the folder ours to install into.
func syncExtensionDir(sysExt, privExt string, extra map[string][]byte, owned bool, packaged func(path string) bool) error {
	if err := os.MkdirAll(privExt, 0o755); err != nil {
		return err
	}
	marker := filepath.Join(privExt, schema.OwnedExtensionDirMarker)
	if owned {
		if err := os.WriteFile(marker, []byte(schema.OwnedExtensionDirNote), 0o644); err != nil {
			return err
		}
	} else {
		os.Remove(marker)
	}
	entries, err := os.ReadDir(sysExt)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, own := extra[e.Name()]; own {
			continue
		}
		if packaged != nil && !packaged(filepath.Join(sysExt, e.Name())) {
			// Dropped there by hand or by a program: not part of the PostgreSQL the machine
			// installed. A link made by an earlier version goes too.
			if fi, err := os.Lstat(filepath.Join(privExt, e.Name())); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				os.Remove(filepath.Join(privExt, e.Name()))
			}
			continue
		}
		target := filepath.Join(privExt, e.Name())
		if fi, err := os.Lstat(target); err == nil && fi.Mode().IsRegular() {
			continue // a file of ours shadows the system's
		}
		if err := ensureSymlink(filepath.Join(sysExt, e.Name()), target); err != nil {
			return err
		}
	}
	// Links whose system file went away (a package was removed).
	mine, err := os.ReadDir(privExt)
	if err != nil {
		return err
	}
	for _, e := range mine {
		p := filepath.Join(privExt, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				os.Remove(p)
			}
		}
	}
	for name, body := range extra {
		p := filepath.Join(privExt, name)
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			os.Remove(p)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ensureSymlink(target, link string) error {
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	os.Remove(link)
	return os.Symlink(target, link)
}

// linkOrCopy puts src at dst as a hard link (free) or, across file systems, a copy.
// A symlink would not do: PostgreSQL resolves symlinks to find its installation.
func linkOrCopy(src, dst string) error {
	si, err := os.Stat(src)
	if err != nil {
		return err
	}
	if di, err := os.Stat(dst); err == nil && (os.SameFile(si, di) || (di.Size() == si.Size() && di.ModTime().Equal(si.ModTime()))) {
		return nil
	}
	tmp := dst + ".tmp"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		if err := copyFile(src, tmp, si); err != nil {
			return err
		}
	}
	return os.Rename(tmp, dst)
}

func copyFile(src, dst string, si os.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chtimes(dst, si.ModTime(), si.ModTime())
}

// dpkgInfoDir is where Debian lists the files of every installed package.
var dpkgInfoDir = "/var/lib/dpkg/info"

// packagedFiles returns a test for "a package installed this file", for the files of dir,
// from dpkg's file lists; nil when there is no package database to ask.
func packagedFiles(dir string) func(string) bool {
	lists, err := filepath.Glob(filepath.Join(dpkgInfoDir, "*.list"))
	if err != nil || len(lists) == 0 {
		return nil
	}
	prefix := filepath.Clean(dir) + "/"
	files := map[string]bool{}
	for _, l := range lists {
		b, err := os.ReadFile(l)
		if err != nil || !bytes.Contains(b, []byte(prefix)) {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, prefix) {
				files[line] = true
			}
		}
	}
	return func(p string) bool { return files[p] }
}
