// Package localpg runs PostgreSQL clusters that this project manages itself: the dev
// cluster of a checkout (<repo>/.pgdata, see Dev) and throwaway clusters for tests.
//
// A cluster is one folder: data/ (PGDATA), install/ (a private installation, see
// install.go), port (the TCP port it listens on, on 127.0.0.1), server.log and a lock
// file that serializes Start/Stop across processes. When this process is root the server
// runs as the postgres system user. Settings suit tests (see DefaultSettings) and live in
// data/pgflow-wasm.conf, so ALTER SYSTEM (postgresql.auto.conf) still overrides them.
package localpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SuperUser is the cluster's superuser (trust authentication, 127.0.0.1 only).
const SuperUser = "postgres"

// DefaultSettings are written to data/pgflow-wasm.conf. fsync is off: these clusters hold
// disposable dev and test data, and without fsync a parallel test run is several times
// faster on a small disk. Benchmarks may turn it on with ALTER SYSTEM SET fsync = on and
// pg_reload_conf(): postgresql.auto.conf is read after this file.
var DefaultSettings = map[string]string{
	"max_connections":                     "300", // parallel test packages, each with its pools
	"shared_buffers":                      "128MB",
	"fsync":                               "off",
	"full_page_writes":                    "off", // only matters for crash safety, which fsync=off gave up
	"max_wal_size":                        "1GB",
	"log_min_messages":                    "warning",
	"log_line_prefix":                     "'%m [%p] %q%u@%d '",
	"unix_socket_permissions":             "0777",
	"idle_in_transaction_session_timeout": "0",
}

// Config describes a cluster.
type Config struct {
	Dir  string // the cluster's folder (created if missing)
	Port int    // 0: the port stored in Dir, else one derived from Dir's path
	// FixedPort starts the server on Port exactly: Start fails when another process holds it,
	// or when the cluster already runs on another port, instead of taking the next free one.
	FixedPort      bool
	BinDir         string            // "": FindBinDir
	Settings       map[string]string // added to DefaultSettings (same key: this wins)
	ExtensionFiles map[string][]byte // files for the private extension folder (test fixtures)
	// NotOwned leaves out the marker that lets `db install` write into the cluster's
	// extension folder: the cluster then stands in for a server this project did not create.
	NotOwned bool
	Logf     func(format string, args ...any)
}

// Cluster is a managed PostgreSQL cluster. Methods are safe to call from several
// processes at once: they take Dir/lock.
type Cluster struct {
	Dir       string // where the cluster lives (may differ from Config.Dir, see Relocated)
	Relocated string // why Dir is not the requested folder; "" when it is
	Major     int

	port      int
	fixedPort bool
	sys       layout
	priv      layout
	runAs     *account
	settings  map[string]string
	extra     map[string][]byte
	notOwned  bool
	logf      func(string, ...any)
}

// New resolves a cluster's folder, server user, binaries and port. It creates the folder
// but does not initialize or start anything.
func New(cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("localpg: no cluster folder given")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	binDir := cfg.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	major, err := serverMajor(binDir)
	if err != nil {
		return nil, err
	}
	sys, err := systemLayout(binDir, major)
	if err != nil {
		return nil, err
	}
	runAs, err := serverAccount()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Major: major, sys: sys, runAs: runAs, extra: cfg.ExtensionFiles, notOwned: cfg.NotOwned, logf: cfg.Logf}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	c.settings = map[string]string{}
	for k, v := range DefaultSettings {
		c.settings[k] = v
	}
	for k, v := range cfg.Settings {
		c.settings[k] = v
	}

	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	if c.priv, err = privateLayout(sys, filepath.Join(c.Dir, "install")); err != nil {
		return nil, err
	}
	c.port, c.fixedPort = cfg.Port, cfg.FixedPort && cfg.Port != 0
	if c.port == 0 {
		c.port = c.storedPort()
	}
	if c.port == 0 {
		c.port = 15433 + int(fnv32(c.Dir)%10000)
	}
	return c, nil
}

// prepareDir creates the folder, hands it to the server user and, when that user cannot
// reach it, moves the cluster to a folder under the temp dir.
func (c *Cluster) prepareDir() error {
	ctx := context.Background()
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("creating cluster folder: %w", err)
	}
	if err := c.runAs.own(c.Dir); err != nil {
		return err
	}
	if c.runAs.canUse(ctx, c.Dir) {
		return nil
	}
	alt := fallbackDir(c.Dir)
	c.Relocated = fmt.Sprintf("%s is not reachable by %s (a parent folder is closed to it); the cluster lives in %s instead",
		c.Dir, c.runAs, alt)
	c.Dir = alt
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("creating cluster folder: %w", err)
	}
	if err := c.runAs.own(c.Dir); err != nil {
		return err
	}
	if !c.runAs.canUse(ctx, c.Dir) {
		return fmt.Errorf("neither the requested folder nor %s is usable by %s", c.Dir, c.runAs)
	}
	return nil
}

// DataDir is PGDATA.
func (c *Cluster) DataDir() string { return filepath.Join(c.Dir, "data") }

// LogFile is the server log.
func (c *Cluster) LogFile() string { return filepath.Join(c.Dir, "server.log") }

// ExtensionDir is the private extension folder the server reads.
func (c *Cluster) ExtensionDir() string { return filepath.Join(c.priv.share, "extension") }

// Port is the TCP port (on 127.0.0.1) the cluster listens on, or will.
func (c *Cluster) Port() int { return c.port }

// URL is a connection URL for a database of the cluster, as its superuser.
func (c *Cluster) URL(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(SuperUser), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

func (c *Cluster) portFile() string { return filepath.Join(c.Dir, "port") }

func (c *Cluster) storedPort() int {
	b, err := os.ReadFile(c.portFile())
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

// runningPort reads the port of a running server from postmaster.pid (line 4).
func (c *Cluster) runningPort() int {
	b, err := os.ReadFile(filepath.Join(c.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(lines[3]))
	return p
}

func (c *Cluster) pgctl() string { return filepath.Join(c.priv.bin, "pg_ctl") }

// Running reports whether the server is up (pg_ctl status).
func (c *Cluster) Running(ctx context.Context) bool {
	if _, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION")); err != nil {
		return false
	}
	if _, err := os.Stat(c.pgctl()); err != nil {
		return false
	}
	_, err := c.runAs.run(ctx, c.pgctl(), "status", "-D", c.DataDir())
	return err == nil
}

// runningVersion is the running server's "15.18" ("" when it cannot be asked).
func (c *Cluster) runningVersion(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var v string
	if conn.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&v) != nil {
		return ""
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// Start initializes the cluster if needed and starts it unless it runs already.
func (c *Cluster) Start(ctx context.Context) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return c.startLocked(ctx)
}

func (c *Cluster) startLocked(ctx context.Context) error {
	if err := syncInstall(c.sys, c.priv, c.extra, !c.notOwned); err != nil {
		return fmt.Errorf("preparing the private PostgreSQL installation in %s: %w", c.Dir, err)
	}
	if err := c.initdb(ctx); err != nil {
		return err
	}
	if c.Running(ctx) {
		if p := c.runningPort(); p != 0 && c.fixedPort && p != c.port {
			return fmt.Errorf("the cluster in %s already runs on port %d, not %d: stop it (pgflow-wasm localdb down) and start it again on the port you want", c.Dir, p, c.port)
		} else if p != 0 {
			c.port = p
		}
		// A package upgrade (15.18 -> 15.20) replaces the libraries the running server
		// loads (plpgsql.so) under it: new sessions then fail. Restart on the new binaries.
		running, installed := c.runningVersion(ctx), binaryVersion(c.priv.bin)
		if running == "" || installed == "" || running == installed {
			return nil
		}
		c.logf("PostgreSQL in %s runs %s but the installed server is %s: restarting it", c.Dir, running, installed)
		if err := c.stopLocked(ctx); err != nil {
			return err
		}
	}
	if err := c.writeSettings(); err != nil {
		return err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(c.port)
		if c.fixedPort && (err != nil || port != c.port) {
			return fmt.Errorf("port %d on 127.0.0.1 is taken by another process: choose another port, or leave the port out to take a free one", c.port)
		}
		if err != nil {
			return err
		}
		c.port = port
		if err := os.WriteFile(c.portFile(), []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
			return err
		}
		c.runAs.own(c.portFile())
		lastErr = c.pgCtlStart(ctx)
		if lastErr == nil {
			c.logf("PostgreSQL %d started in %s on 127.0.0.1:%d", c.Major, c.Dir, c.port)
			return nil
		}
		if !strings.Contains(lastErr.Error(), "could not bind") && !strings.Contains(lastErr.Error(), "already in use") {
			return lastErr
		}
		if c.fixedPort {
			return fmt.Errorf("port %d on 127.0.0.1 was taken by another process as the server started: choose another port, or leave the port out to take a free one (%w)", c.port, lastErr)
		}
		c.port++ // another process took the port between our check and the server's bind
	}
	return lastErr
}

func (c *Cluster) pgCtlStart(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1", c.port)
	sock := filepath.Join(c.Dir, "run")
	// A Unix socket path must fit in 107 bytes; a too deep folder gets TCP only.
	if len(sock)+len("/.s.PGSQL.65535") < 100 && !strings.ContainsAny(sock, `'" \`) {
		if err := os.MkdirAll(sock, 0o755); err != nil {
			return err
		}
		c.runAs.own(sock)
		opts += fmt.Sprintf(" -c unix_socket_directories='%s'", sock)
	} else {
		opts += " -c unix_socket_directories=''"
	}
	logStart := fileSize(c.LogFile())
	out, err := c.runAs.run(ctx, c.pgctl(), "start", "-D", c.DataDir(), "-l", c.LogFile(), "-w", "-t", "120", "-s", "-o", opts)
	if err != nil {
		return fmt.Errorf("starting PostgreSQL in %s on port %d: %v: %s\nserver log:\n%s", c.Dir, c.port, err, out, tailFrom(c.LogFile(), logStart))
	}
	return nil
}

// initdb creates PGDATA on first use.
func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION")); err == nil {
		return nil
	}
	// A half-made data folder from an interrupted initdb would make initdb refuse.
	os.RemoveAll(c.DataDir())
	out, err := c.runAs.run(ctx, filepath.Join(c.priv.bin, "initdb"), "-D", c.DataDir(), "-U", SuperUser,
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if err != nil {
		return fmt.Errorf("initdb in %s (as %s): %v: %s", c.DataDir(), c.runAs, err, out)
	}
	conf := filepath.Join(c.DataDir(), "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString("\n# pgflow-wasm: settings for dev and test clusters (written at each start)\ninclude_if_exists = 'pgflow-wasm.conf'\n")
	return err
}

// writeSettings (re)writes data/pgflow-wasm.conf; it takes effect at the next start.
func (c *Cluster) writeSettings() error {
	keys := make([]string, 0, len(c.settings))
	for k := range c.settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by pgflow-wasm (internal/localpg) at each start: edits here are lost.\n" +
		"# ALTER SYSTEM still overrides these (postgresql.auto.conf is read later).\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, c.settings[k])
	}
	p := filepath.Join(c.DataDir(), "pgflow-wasm.conf")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return c.runAs.own(p)
}

// Stop stops the server (fast shutdown); stopping a stopped cluster is not an error.
func (c *Cluster) Stop(ctx context.Context) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return c.stopLocked(ctx)
}

func (c *Cluster) stopLocked(ctx context.Context) error {
	if !c.Running(ctx) {
		return nil
	}
	out, err := c.runAs.run(ctx, c.pgctl(), "stop", "-D", c.DataDir(), "-m", "fast", "-w", "-t", "120", "-s")
	if err != nil {
		return fmt.Errorf("stopping PostgreSQL in %s: %v: %s", c.Dir, err, out)
	}
	return nil
}

// Crash stops the server as a power cut would (immediate shutdown: no checkpoint, every
// session dropped, crash recovery at the next start) and starts it again.
func (c *Cluster) Crash(ctx context.Context) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if out, err := c.runAs.run(ctx, c.pgctl(), "stop", "-D", c.DataDir(), "-m", "immediate", "-w", "-t", "120", "-s"); err != nil {
		return fmt.Errorf("crashing PostgreSQL in %s: %v: %s", c.Dir, err, out)
	}
	return c.startLocked(ctx)
}

// Restart stops and starts the server (settings files are rewritten in between).
func (c *Cluster) Restart(ctx context.Context) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.stopLocked(ctx); err != nil {
		return err
	}
	return c.startLocked(ctx)
}

// Remove stops the cluster and deletes its folder.
func (c *Cluster) Remove(ctx context.Context) error {
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return os.RemoveAll(c.Dir)
}

// freePort returns the first port from start on that nobody listens on.
func freePort(start int) (int, error) {
	for p := start; p < start+200 && p < 65536; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free TCP port on 127.0.0.1 in %d-%d", start, start+199)
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tailFrom returns what was appended to a log since offset (at most the last 4 KB).
func tailFrom(p string, offset int64) string {
	b, err := os.ReadFile(p)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	b = b[offset:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}
