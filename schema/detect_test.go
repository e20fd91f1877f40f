package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Every release from 0.8.1 to 0.14.1, installed on plain PostgreSQL (stand-ins where they
// need pg_net, pg_cron and vault), is told apart from the catalogue.
func TestDetectsEveryReleaseFrom081To0141(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		files            int
		release, version string
		flowInput        bool
		requeue          bool
		conditions       bool
	}{
		{12, "0.8.1", "0.8", false, false, false},
		{14, "0.10.0", "0.10", false, false, false},
		{15, "0.11.0", "0.11", false, false, false},
		{16, "0.12.0", "0.12", true, false, false},
		{17, "0.13.1", "0.13.0", true, false, false},
		{18, "0.13.2", "0.13.2", true, true, false},
		{19, "0.13.3", "0.13.2", true, true, false},
		{20, "0.14.1", "0.14", true, true, true},
	} {
		t.Run(c.release, func(t *testing.T) {
			t.Parallel()
			dir := pgtest.PgflowRelease(t, c.files)
			conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
			rep, err := schema.Install(context.Background(), conn, schema.Options{MigrationsDir: dir, Layer: schema.LayerSchema})
			if err != nil {
				t.Fatal(err)
			}
			if rep.PgflowVersion != c.release {
				t.Errorf("the folder was read as pgflow %s, want %s", rep.PgflowVersion, c.release)
			}
			p, err := schema.DetectPgflow(context.Background(), conn)
			if err != nil {
				t.Fatal(err)
			}
			if p.Version != c.version || p.FlowInput != c.flowInput || p.Requeue != c.requeue || p.Conditions != c.conditions || p.Supported() != nil {
				t.Errorf("detected %+v (supported: %v), want version %s, flow_input %v, requeue %v, conditions %v",
					p, p.Supported(), c.version, c.flowInput, c.requeue, c.conditions)
			}
		})
	}
}

// A pgflow newer than any pgflow-wasm knows is refused with what was found and what is
// supported: here a task status no release has, and the 4-argument start_tasks of an
// unreleased 0.17 pre-release.
func TestANewerPgflowIsRefusedNotGuessed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, sql, want string }{
		{"a new task status", `alter table pgflow.step_tasks drop constraint valid_status;
			alter table pgflow.step_tasks add constraint valid_status check (status in ('queued', 'started', 'completed', 'failed', 'paused'))`,
			"(tasks have a status paused)"},
		{"a 4-argument start_tasks", `create function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid, queue_name text)
			returns setof pgflow.step_task_record language sql as 'select * from pgflow.start_tasks(flow_slug, msg_ids, worker_id)'`,
			"(start_tasks takes a queue name but no step (an unreleased 0.17 pre-release))"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			conn := connect(t, pgtest.NewDB(t, pgtest.Empty()).URL)
			if _, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: pgtest.Pgflow014(t), Layer: schema.LayerSchema}); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, c.sql); err != nil {
				t.Fatal(err)
			}
			p, err := schema.DetectPgflow(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			want := "this database has a pgflow newer than any pgflow-wasm knows " + c.want + ": pgflow-wasm speaks pgflow " + schema.SupportedPgflow
			if err := p.Supported(); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Supported() = %v\nwant %s", err, want)
			}
		})
	}
}

func TestNoPgflowAtAll(t *testing.T) {
	t.Parallel()
	p, err := schema.DetectPgflow(context.Background(), connect(t, pgtest.NewDB(t, pgtest.Empty()).URL))
	if err != nil || p.Installed() || p.Supported() == nil || !strings.Contains(p.Supported().Error(), "pgflow-wasm db install") {
		t.Fatalf("an empty database: %+v %v; want not installed, with the command that installs it", p, err)
	}
}

// Where the server offers pg_cron, preloaded for this database, pgflow's migrations get it
// when it is 1.5 or newer (pgflow schedules a job every second). Debian 12 ships 1.4: there
// the stand-in goes in instead, and db install says why.
func TestAServersPgCronIsUsedWhenItCanRunPgflowsJobs(t *testing.T) {
	t.Parallel()
	dir := pgtest.Pgflow014(t)
	c := pgtest.NewCluster(t, pgtest.Settings(map[string]string{
		"shared_preload_libraries": "'pg_cron'",
		"cron.database_name":       "'pgflow_cron'",
	}))
	ctx := context.Background()
	admin := connect(t, c.URL("postgres"))
	var version string
	if err := admin.QueryRow(ctx, `select coalesce((select default_version from pg_available_extensions where name = 'pg_cron'), '')`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version == "" {
		t.Skip("this machine has no pg_cron: `apt-get install postgresql-15-cron` (make does)")
	}
	if _, err := admin.Exec(ctx, `create database pgflow_cron`); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.URL("pgflow_cron"))
	rep, err := schema.Install(ctx, conn, schema.Options{MigrationsDir: dir, Layer: schema.LayerSchema})
	if err != nil {
		t.Fatal(err)
	}
	var cron schema.StandIn
	for _, s := range rep.StandIns {
		if s.Name == "pg_cron" {
			cron = s
		}
	}
	if ok, _ := schema.VersionAtLeast(version, "1.5"); !ok {
		if cron.Action != "installed" || !strings.Contains(cron.Note, "offers pg_cron "+version+", but") {
			t.Fatalf("pg_cron %s: %s; want the stand-in, saying why the server's is not used", version, cron)
		}
		return
	}
	var active bool
	if err := conn.QueryRow(ctx, `select active from cron.job where jobname = 'pgflow_requeue_stalled_tasks'`).Scan(&active); err != nil || cron.Action != "real" || !active {
		t.Fatalf("pg_cron %s: %s; pgflow's requeue job active %v (%v): want the real pg_cron running it", version, cron, active, err)
	}
}
