package localpg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// CloneAsStandby fills this (not yet started) cluster's data folder with a base backup of
// primary and configures it as a streaming standby of it (pg_basebackup -R): Start then
// runs it as a hot standby, read-only, until Promote. For failover tests.
func (c *Cluster) CloneAsStandby(ctx context.Context, primary *Cluster) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION")); err == nil {
		return fmt.Errorf("%s already has a data folder", c.Dir)
	}
	if err := syncInstall(c.sys, c.priv, c.extra, !c.notOwned); err != nil {
		return err
	}
	// pg_basebackup is a client: the system installation has it (the private one holds the server).
	out, err := c.runAs.run(ctx, filepath.Join(c.sys.bin, "pg_basebackup"), "-D", c.DataDir(), "-h", "127.0.0.1",
		"-p", strconv.Itoa(primary.Port()), "-U", SuperUser, "-R", "-X", "stream", "--no-sync", "-c", "fast")
	if err != nil {
		return fmt.Errorf("pg_basebackup of %s into %s: %v: %s", primary.Dir, c.DataDir(), err, out)
	}
	return nil
}

// Promote makes a standby a primary (pg_ctl promote) and waits until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if out, err := c.runAs.run(ctx, c.pgctl(), "promote", "-D", c.DataDir(), "-w", "-t", "120", "-s"); err != nil {
		return fmt.Errorf("promoting PostgreSQL in %s: %v: %s", c.Dir, err, out)
	}
	return nil
}
