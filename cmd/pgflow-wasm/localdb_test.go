package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Outside any checkout, localdb keeps one cluster per user (XDG_DATA_HOME, else
// ~/.local/share/pgflow-wasm/pgdata) instead of refusing.
func TestLocalDBWorksOutsideACheckout(t *testing.T) {
	t.Parallel()
	home, elsewhere := t.TempDir(), t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(binary, args...)
		cmd.Dir = elsewhere
		cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+home)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("localdb", "up")
	if err != nil {
		t.Fatalf("localdb up outside a checkout: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = run("localdb", "down")
		// A folder postgres cannot reach (the test's temporary home is private to root)
		// moves the cluster to /tmp: remove it with the test's folders.
		if m := regexp.MustCompile(`the cluster lives in (/tmp/pgflow-wasm-\S+) instead`).FindStringSubmatch(out); m != nil {
			_ = os.RemoveAll(m[1])
		}
	})
	url := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("the printed URL %q does not connect: %v\n%s", url, err, out)
	}
	conn.Close(context.Background())
	if status, err := run("localdb", "status"); err != nil || !strings.Contains(status, filepath.Join(home, "pgflow-wasm", "pgdata")) &&
		!strings.Contains(status, "relocated") {
		t.Errorf("localdb status: %v\n%s", err, status)
	}
}
