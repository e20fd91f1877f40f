package localpg

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ServerUser is the system user PostgreSQL runs as when this process is root (the server
// refuses to run as root). Debian's postgresql packages create it.
const ServerUser = "postgres"

// account is who runs the server: nil means this process's own user.
type account struct {
	name     string
	uid, gid uint32
}

// serverAccount picks the account: the postgres user when we are root, else ourselves.
func serverAccount() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(ServerUser)
	if err != nil {
		return nil, fmt.Errorf("running as root needs a %q system user to run PostgreSQL as (the postgresql packages create it): %w", ServerUser, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &account{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

func (a *account) String() string {
	if a == nil {
		return "this process's user"
	}
	return "user " + a.name
}

// command builds a command that runs as the account, with the PG* environment removed
// (PGPORT, PGDATA... would change what pg_ctl does) and messages in English (we read them).
func (a *account) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	env := []string{"LC_ALL=C", "LANG=C"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	if a != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid}}
		env = append(env, "HOME="+os.TempDir(), "USER="+a.name)
	}
	cmd.Env = env
	cmd.Dir = "/"
	return cmd
}

// run runs a command as the account and returns its combined output.
func (a *account) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := a.command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// own gives paths to the account (no-op when we run the server as ourselves).
func (a *account) own(paths ...string) error {
	if a == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Lchown(p, int(a.uid), int(a.gid)); err != nil {
			return fmt.Errorf("giving %s to %s: %w", p, a.name, err)
		}
	}
	return nil
}

// canUse reports whether the account can create files in dir (every parent must be
// searchable: a folder under /root is not, for the postgres user).
func (a *account) canUse(ctx context.Context, dir string) bool {
	if a == nil {
		return true
	}
	_, err := a.run(ctx, "/bin/sh", "-c", `test -d "$1" && test -w "$1" && test -x "$1"`, "sh", dir)
	return err == nil
}

// fallbackDir is where a cluster goes when its folder is out of the server user's reach:
// a folder under the system temp dir, named after the requested one so it is stable.
func fallbackDir(requested string) string {
	name := filepath.Base(filepath.Dir(requested)) + "-" + strings.TrimPrefix(filepath.Base(requested), ".")
	return filepath.Join(os.TempDir(), fmt.Sprintf("pgflow-wasm-%s-%08x", name, fnv32(requested)))
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
