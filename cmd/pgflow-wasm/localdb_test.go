package main_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

// localdb up --port starts the cluster on that port, and says so clearly when it cannot: the
// port taken by another process, or the cluster already running on another port.
func TestLocalDBUpListensOnTheGivenPort(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pg")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(binary, append([]string{"localdb"}, append(args, "--dir", dir)...)...).CombinedOutput()
		return string(out), err
	}
	freePort := func() (int, net.Listener) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l.Addr().(*net.TCPAddr).Port, l
	}
	port, l := freePort()
	l.Close()
	out, err := run("up", "--port", strconv.Itoa(port))
	t.Cleanup(func() {
		_, _ = run("down")
		if m := regexp.MustCompile(`the cluster lives in (/tmp/pgflow-wasm-\S+) instead`).FindStringSubmatch(out); m != nil {
			_ = os.RemoveAll(m[1])
		}
	})
	if err != nil {
		t.Fatalf("localdb up --port %d: %v\n%s", port, err, out)
	}
	url := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	if !strings.Contains(url, fmt.Sprintf("127.0.0.1:%d/", port)) {
		t.Fatalf("localdb up --port %d printed %q", port, url)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("the printed URL %q does not connect: %v", url, err)
	}
	conn.Close(context.Background())
	if again, err := run("up", "--port", strconv.Itoa(port)); err != nil || !strings.Contains(again, url) {
		t.Errorf("localdb up --port again on the running cluster: %v\n%s", err, again)
	}
	other, ol := freePort()
	ol.Close()
	if msg, err := run("up", "--port", strconv.Itoa(other)); err == nil || !strings.Contains(msg, fmt.Sprintf("already runs on port %d, not %d", port, other)) {
		t.Errorf("localdb up --port %d on a cluster running on %d: %v\n%s", other, port, err, msg)
	}
	if msg, err := run("down"); err != nil {
		t.Fatalf("localdb down: %v\n%s", err, msg)
	}
	taken, hold := freePort()
	defer hold.Close()
	if msg, err := run("up", "--port", strconv.Itoa(taken)); err == nil || !strings.Contains(msg, fmt.Sprintf("port %d on 127.0.0.1 is taken by another process", taken)) {
		t.Errorf("localdb up --port %d on a port another process holds: %v\n%s", taken, err, msg)
	}
	// Without --port the cluster comes back on the port it used last.
	if again, err := run("up"); err != nil || !strings.Contains(again, url) {
		t.Errorf("localdb up after --port %d: %v, want %s\n%s", port, err, url, again)
	}
}
