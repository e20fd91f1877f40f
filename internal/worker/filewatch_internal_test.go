package worker

import (
	"os"
	"path/filepath"
	"testing"
)

// lookUntilChanged looks at the watched file as the supervisor's ticker does, a few times.
func lookUntilChanged(fw *fileWatch, path string) []string {
	for look := 0; look < 4; look++ {
		if changed := fw.changed(nil, nil, path); len(changed) > 0 {
			return changed
		}
	}
	return nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A write landing after the files were hashed at load but before the watch starts from
// them is a change: the watch compares against the stat taken before the hash, not a later one.
func TestAWriteBetweenLoadAndWatchIsSeen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flows.yaml")
	writeFile(t, path, "loaded")
	loaded := snapshotOf(path, nil, nil)
	writeFile(t, path, "written while the worker started")

	fw := &fileWatch{}
	fw.reset(loaded)
	if changed := lookUntilChanged(fw, path); len(changed) != 1 || changed[0] != path {
		t.Fatalf("changed = %v, want [%s]", changed, path)
	}
}

// A file rewritten with the same bytes is not a change; one with other bytes is, once its
// stat has stayed put for a look.
func TestTheWatchReportsContentNotWrites(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flows.yaml")
	writeFile(t, path, "same")
	fw := &fileWatch{}
	fw.reset(snapshotOf(path, nil, nil))

	writeFile(t, path, "same")
	if changed := lookUntilChanged(fw, path); len(changed) != 0 {
		t.Fatalf("the same bytes written again: changed = %v", changed)
	}
	writeFile(t, path, "other bytes")
	if changed := fw.changed(nil, nil, path); len(changed) != 0 {
		t.Fatalf("changed at the first look after a write (a writer may not be done): %v", changed)
	}
	if changed := lookUntilChanged(fw, path); len(changed) != 1 {
		t.Fatalf("other bytes: changed = %v, want the file", changed)
	}
}
