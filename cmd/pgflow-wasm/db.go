package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo"
	"github.com/pgflow-wasm/pgflow-wasm/internal/runctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
	"github.com/pgflow-wasm/pgflow-wasm/schema/pgflowsql"
)

func dbCommand() *cli.Command {
	builtIn := "pgflow's SQL is not built into this binary (build it with make)"
	if _, version, ok := pgflowsql.Migrations(); ok {
		builtIn = "pgflow " + version + ", built into this binary"
	}
	migrations := &cli.StringFlag{
		Name:    "migrations",
		EnvVars: []string{schema.MigrationsDirEnv},
		Usage: "the `DIR` of pgflow's SQL migrations, e.g. pgflow 0.14.1's (pgflow's pkgs/core/supabase/migrations, or the\n" +
			"\tcopy in your supabase/migrations); default: " + builtIn,
	}
	return &cli.Command{
		Name:            "db",
		Usage:           "install or inspect pgmq, realtime.send and pgflow's schema in a database",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{
			{
				Name:  "install",
				Usage: "install pgmq (real or the pgflow-wasm layer), realtime.send and pgflow's migrations",
				Description: "Safe to re-run: what is installed is kept, applied migrations are skipped, and\n" +
					"an older pgflow-wasm pgmq layer is updated in place (queues and messages kept).\n" +
					"pgmq: a real pgmq >= 1.5 offered by the server is used; otherwise pgflow-wasm's\n" +
					"pgmq-compatible layer is installed as a plain schema. Only on a cluster pgflow-wasm\n" +
					"created itself (`pgflow-wasm localdb`) does it become an extension: the extension folder\n" +
					"of the machine's PostgreSQL package is shared by every cluster on the host, so nothing is\n" +
					"written there unless you ask with --pgmq extension (the output says where it wrote).",
				Flags: []cli.Flag{databaseURLFlag(), migrations,
					&cli.StringFlag{Name: "pgmq", Value: "auto", Usage: "how to install the pgmq layer when the server has no real pgmq: auto, extension or schema (see above)"}},
				Action: dbInstall,
			},
			{
				Name:      "grant-worker",
				Usage:     "create a worker login that is not a superuser (if missing) and grant it what `serve` needs",
				ArgsUsage: "LOGIN",
				Description: "Run it as the owner of pgflow's and pgmq's schemas (the role that ran `db install`),\n" +
					"after `db install`. The login gets pgflow's and pgmq's tables and functions, realtime.send\n" +
					"and pgflow-wasm's bookkeeping (docs/database.md, section 7), and the same on queue tables\n" +
					"this role creates later (`compile` of a new flow). It is never a member of a step's role:\n" +
					"steps log in as their own roles. A superuser is refused.\n\n" +
					"Example:\n" +
					"   WORKER_PASSWORD=... pgflow-wasm db grant-worker --password-env WORKER_PASSWORD pgflow_worker\n" +
					"   pgflow-wasm serve --database-url postgres://pgflow_worker:...@host/app",
				Flags: []cli.Flag{databaseURLFlag(), &cli.StringFlag{Name: "password-env", Usage: "set the login's password to " +
					"the value of the environment variable `NAME` (default: leave it as it is)"}},
				Action: dbGrantWorker,
			},
			{
				Name:  "status",
				Usage: "report pgmq, realtime.send, pgflow migrations and schedules; exit 1 unless all are installed",
				Flags: []cli.Flag{databaseURLFlag(), migrations, &cli.StringFlag{Name: "flows", Value: "flows.yaml",
					Usage: "the flows file whose schedules' next ticks to show (skipped when the default is absent)"}},
				Action: dbStatus,
			},
			dbPruneCommand(),
		},
	}
}

func dbInstall(c *cli.Context) error {
	mode, err := schema.ParseLayerMode(c.String("pgmq"))
	if err != nil {
		return cli.Exit("--pgmq: "+err.Error(), 2)
	}
	conn, err := schema.Connect(c.Context, c.String("database-url"))
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer conn.Close(c.Context)
	rep, err := schema.Install(c.Context, conn, schema.Options{MigrationsDir: c.String("migrations"), Layer: mode})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	// The operators' tables (audit, reruns, worker processes) exist before a worker login
	// without the right to create them registers its process.
	if err := runctl.EnsureTables(c.Context, conn); err != nil {
		return cli.Exit("creating pgflow-wasm's operator tables (pgflow_wasm.operator_actions, reruns, worker_processes, process_workers): "+err.Error(), 1)
	}
	w := c.App.Writer
	switch rep.PgmqAction {
	case "installed":
		fmt.Fprintf(w, "pgmq:          installed %s\n", rep.Pgmq)
		if rep.ExtensionDir != "" {
			fmt.Fprintf(w, "               extension files in %s\n", rep.ExtensionDir)
		}
	case "created":
		fmt.Fprintf(w, "pgmq:          created %s from the server's extension files\n", rep.Pgmq)
	case "updated":
		fmt.Fprintf(w, "pgmq:          updated to %s (queues and messages kept)\n", rep.Pgmq)
	default:
		fmt.Fprintf(w, "pgmq:          kept %s\n", rep.Pgmq)
	}
	if rep.PgmqNote != "" { // why a plain schema, or why an older layer was kept
		fmt.Fprintf(w, "               %s\n", rep.PgmqNote)
	}
	fmt.Fprintf(w, "realtime.send: %s %s\n", rep.RealtimeAction, rep.Realtime)
	for i, s := range rep.StandIns {
		label := "               "
		if i == 0 {
			label = "stand-ins:     "
		}
		fmt.Fprintf(w, "%s%s\n", label, s)
	}
	fmt.Fprintf(w, "migrations:    %d applied, %d already applied (pgflow %s)\n", len(rep.Applied), rep.AlreadyApplied, rep.PgflowVersion)
	for _, name := range rep.Applied {
		fmt.Fprintf(w, "               + %s\n", name)
	}
	fmt.Fprintf(w, "runs index:    %s pgflow.%s (the dashboard's runs page, newest first)%s\n", rep.RunsIndex, schema.RunsIndex, busyNote(rep.RunsIndex))
	fmt.Fprintf(w, "input index:   %s pgflow.%s (the dashboard's search by input field)%s\n", rep.InputIndex, schema.InputIndex, busyNote(rep.InputIndex))
	return nil
}

// busyNote says what "busy" means: the index was left to the process building one now.
func busyNote(state schema.RunsIndexState) string {
	if state != schema.RunsIndexBusy {
		return ""
	}
	return ": left to another pgflow-wasm process building an index on pgflow.runs now; once it is done, `db install` again builds this one if it is still missing"
}

func dbGrantWorker(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("db grant-worker: give the login's name, e.g. `pgflow-wasm db grant-worker pgflow_worker`", 2)
	}
	login := c.Args().First()
	var password string
	if env := c.String("password-env"); env != "" {
		var ok bool
		if password, ok = os.LookupEnv(env); !ok || password == "" {
			return cli.Exit("--password-env: "+env+" is not set (or empty) in the environment", 2)
		}
	}
	conn, err := schema.Connect(c.Context, c.String("database-url"))
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer conn.Close(c.Context)
	rep, err := schema.GrantWorker(c.Context, conn, login, password)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	action := "granted"
	if rep.Created {
		action = "created and granted"
	}
	fmt.Fprintf(c.App.Writer, "worker login %s: %s the worker's rights (not a superuser)\n", login, action)
	return nil
}

func dbStatus(c *cli.Context) error {
	conn, err := schema.Connect(c.Context, c.String("database-url"))
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer conn.Close(c.Context)
	// The migrations only add "pending" counts: a binary built without pgflow's SQL can still
	// say what the database has.
	m, err := schema.LoadMigrations(c.String("migrations"))
	if err != nil && c.IsSet("migrations") {
		return cli.Exit(err.Error(), 1)
	}
	st, err := schema.Status(c.Context, conn, m)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	w := c.App.Writer
	bi := buildinfo.Get()
	sql := bi.PgflowSQL
	if sql == "" {
		sql = "none embedded"
	}
	fmt.Fprintf(w, "pgflow-wasm:   %s (commit %s, engines %s, pgflow SQL %s)\n", bi.Version, bi.Commit, bi.EngineList(), sql)
	fmt.Fprintf(w, "database:      %s on PostgreSQL %s\n", st.Database, st.Server)
	fmt.Fprintf(w, "pgmq:          %s\n", st.Pgmq)
	if st.Pgmq.Kind == schema.PgmqMissing && st.PgmqAvailable.Version != "" {
		who := "a real pgmq"
		if st.PgmqAvailable.Ours {
			who = "the pgflow-wasm layer"
		}
		fmt.Fprintf(w, "               the server offers %s %s as an extension\n", who, st.PgmqAvailable.Version)
	}
	if st.Pgmq.Kind == schema.PgmqLayer && st.Pgmq.Version != schema.LayerVersion {
		fmt.Fprintf(w, "               this pgflow-wasm ships layer %s: `pgflow-wasm db install` updates it in place (docs/database.md)\n", schema.LayerVersion)
	}
	fmt.Fprintf(w, "realtime.send: %s\n", st.Realtime)
	pending := ""
	if m != nil {
		pending = fmt.Sprintf(", %d pending", len(st.Pending))
	}
	switch {
	case st.PgflowVersion != "":
		fmt.Fprintf(w, "pgflow:        %s (%d migrations applied by pgflow-wasm%s)\n", st.PgflowVersion, len(st.Migrations), pending)
	case st.Protocol.Installed():
		fmt.Fprintf(w, "pgflow:        installed by another tool (no migrations recorded by pgflow-wasm)\n")
	default:
		fmt.Fprintf(w, "pgflow:        not installed (%d migrations applied%s)\n", len(st.Migrations), pending)
	}
	support := "pgflow-wasm speaks it"
	if err := st.Protocol.Supported(); err != nil {
		support = "not supported: pgflow-wasm speaks pgflow " + schema.SupportedPgflow
	}
	if st.Protocol.Installed() {
		fmt.Fprintf(w, "protocol:      %s, detected from the catalogue (%s)\n", st.Protocol, support)
	}
	for _, m := range st.Migrations {
		note := ""
		for _, name := range m.Skipped {
			why := "a pgflow-wasm stand-in replaces it"
			if name == "pgmq" {
				why = "pgmq is a plain schema"
			}
			note += fmt.Sprintf("  (its CREATE EXTENSION %s was skipped: %s)", name, why)
		}
		fmt.Fprintf(w, "               %s  %s%s\n", m.AppliedAt, m.Name, note)
	}
	for _, name := range st.Pending {
		fmt.Fprintf(w, "               pending             %s\n", name)
	}
	if st.RunsIndex != "" {
		note := ""
		if st.RunsIndex != "present" {
			note = " (the dashboard's runs page sorts every run without it; `db install` or the dashboard's start creates it)"
		}
		fmt.Fprintf(w, "runs index:    pgflow.%s %s%s\n", schema.RunsIndex, st.RunsIndex, note)
	}
	if err := printSchedules(c, conn); err != nil {
		return err
	}
	if problems := st.Problems(); len(problems) > 0 {
		return cli.Exit("not installed: "+strings.Join(problems, "; ")+"; run `pgflow-wasm db install`", 1)
	}
	return nil
}

// printSchedules lists each scheduled flow: its cron and next tick (from the flows file, when
// there is one) and the last tick the database recorded, with its run.
func printSchedules(c *cli.Context, conn *pgx.Conn) error {
	recorded, err := schedule.Recorded(c.Context, conn)
	if err != nil {
		return cli.Exit(fmt.Sprintf("reading the schedules' ticks: %v", err), 1)
	}
	var file *flowfile.File
	if _, statErr := os.Stat(c.String("flows")); statErr == nil || c.IsSet("flows") {
		if file, err = flowfile.Load(c.String("flows")); err != nil && c.IsSet("flows") {
			return cli.Exit(err.Error(), 2)
		} else if err != nil {
			fmt.Fprintf(c.App.ErrWriter, "(the schedules' next ticks are not shown: %s does not load: %v)\n", c.String("flows"), err)
		}
	}
	byFlow := map[string]schedule.FlowTicks{}
	var slugs []string
	for _, r := range recorded {
		byFlow[r.Flow] = r
		slugs = append(slugs, r.Flow)
	}
	if file != nil {
		for _, fl := range file.Flows {
			if _, seen := byFlow[fl.Slug]; fl.Schedule != nil && !seen {
				slugs = append(slugs, fl.Slug)
			}
		}
	}
	w := c.App.Writer
	if len(slugs) == 0 {
		fmt.Fprintln(w, "schedules:     none")
		return nil
	}
	for i, slug := range slugs {
		label := "schedules:     "
		if i > 0 {
			label = strings.Repeat(" ", len(label))
		}
		line := slug
		var sched *flowfile.Schedule
		if file != nil {
			if fl := file.Flow(slug); fl != nil {
				sched = fl.Schedule
			}
		}
		loc := time.Local
		if sched != nil {
			loc = sched.Location
			line += fmt.Sprintf("  %q (%s)  next %s", sched.Cron, loc, sched.Next(time.Now()).In(loc).Format(time.RFC3339))
		} else if file != nil {
			line += "  (no longer scheduled in " + file.Path + ")"
		}
		if r, ok := byFlow[slug]; ok {
			line += fmt.Sprintf("  last %s (run %s)  %d in the last day", r.Last.In(loc).Format(time.RFC3339), r.LastRunID, r.LastDay)
		} else {
			line += "  no tick yet"
		}
		fmt.Fprintln(w, label+line)
	}
	return nil
}
