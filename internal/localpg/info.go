package localpg

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Info describes a cluster for `pgflow-wasm localdb status`.
type Info struct {
	Dir          string
	Relocated    string
	Major        int
	Port         int
	Initialized  bool
	Running      bool
	URL          string // of the postgres database
	LogFile      string
	ExtensionDir string
	RunsAs       string
	Fsync        string // the running server's fsync setting; "" when stopped
}

// Info reports the cluster's state; it never starts anything.
func (c *Cluster) Info(ctx context.Context) Info {
	in := Info{Dir: c.Dir, Relocated: c.Relocated, Major: c.Major, LogFile: c.LogFile(),
		ExtensionDir: c.ExtensionDir(), RunsAs: c.runAs.String()}
	_, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION"))
	in.Initialized = err == nil
	in.Running = c.Running(ctx)
	if in.Running {
		if p := c.runningPort(); p != 0 {
			c.port = p
		}
		if conn, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
			var fsync string
			if conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync) == nil {
				in.Fsync = strings.TrimSpace(fsync)
			}
			conn.Close(ctx)
		}
	}
	in.Port = c.port
	in.URL = c.URL("postgres")
	return in
}
