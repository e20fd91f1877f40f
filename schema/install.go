package schema

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// LayerMode chooses how pgmq gets into the database.
type LayerMode string

const (
	// LayerAuto uses a real pgmq >= 1.5 when the server has one, else installs our layer as
	// an extension when the server's extension folder is one pgflow-wasm created (a cluster
	// of `localdb` or the tests: OwnedExtensionDirMarker), else as a plain schema. It never
	// writes into the extension folder of the machine's PostgreSQL package.
	LayerAuto LayerMode = "auto"
	// LayerExtension installs our layer as an extension, or fails: it writes the extension
	// files into the server's extension folder, whoever owns it (the report says where).
	LayerExtension LayerMode = "extension"
	// LayerSchema installs our layer as a plain schema, even where an extension would work.
	LayerSchema LayerMode = "schema"
)

// ParseLayerMode reads "auto", "extension" or "schema" ("" = auto).
func ParseLayerMode(s string) (LayerMode, error) {
	switch LayerMode(s) {
	case "", LayerAuto:
		return LayerAuto, nil
	case LayerExtension, LayerSchema:
		return LayerMode(s), nil
	}
	return "", fmt.Errorf("unknown pgmq mode %q: use auto, extension or schema", s)
}

// Options tune Install. The zero value installs the built-in pgflow in auto mode.
type Options struct {
	MigrationsDir string    // pgflow's migrations folder; BuiltIn ("") for the pgflow embedded in the binary
	Layer         LayerMode // default LayerAuto
	ExtensionDir  string    // where our extension files go; default the server's own folder
}

// Report says what Install did.
type Report struct {
	Pgmq           Pgmq   // pgmq as installed now
	PgmqAction     string // "installed", "created" (a real extension from the server), "updated" (our older layer) or "kept"
	PgmqNote       string // why auto mode chose a plain schema, or why an older layer was not updated
	ExtensionDir   string // where our extension files are, in extension mode
	Realtime       Realtime
	RealtimeAction string // "installed", "updated" or "kept"
	Applied        []string
	AlreadyApplied int
	PgflowVersion  string
	StandIns       []StandIn // what became of pg_net, pg_cron and vault, when the migrations need them
	RunsIndex      RunsIndexState
	InputIndex     RunsIndexState
}

// Install puts pgmq, realtime.send and pgflow's migrations into the database conn is
// connected to, under the install lock (LockKeyInstall), then pgflow-wasm's indexes and
// tables beside them.
func Install(ctx context.Context, conn *pgx.Conn, opts Options) (Report, error) {
	var rep Report
	if opts.Layer == "" {
		opts.Layer = LayerAuto
	}
	if _, err := ParseLayerMode(string(opts.Layer)); err != nil {
		return rep, err
	}
	migrations, err := LoadMigrations(opts.MigrationsDir)
	if err != nil {
		return rep, err
	}
	rep.PgflowVersion = migrations.PgflowVersion

	who, err := whoAmI(ctx, conn)
	if err != nil {
		return rep, err
	}
	if who.serverVersionNum < 140000 {
		return rep, fmt.Errorf("PostgreSQL %s is too old: pgflow-wasm needs PostgreSQL 14 or newer", who.serverVersion)
	}
	if err := installLocked(ctx, conn, opts, migrations, who, &rep); err != nil {
		return rep, err
	}
	// After the install lock is released: a concurrent index build waits for every
	// transaction in the database, including another installer's wait for that lock.
	if rep.RunsIndex, err = EnsureRunsIndex(ctx, conn); err != nil {
		return rep, stepError(err, who, "creating index pgflow."+RunsIndex+" (the dashboard's runs page)", "to own pgflow.runs")
	}
	if rep.InputIndex, err = EnsureInputIndex(ctx, conn); err != nil {
		return rep, stepError(err, who, "creating index pgflow."+InputIndex+" (the dashboard's search by input)", "to own pgflow.runs")
	}
	if err := EnsureAttemptHistory(ctx, conn); err != nil {
		return rep, stepError(err, who, "creating pgflow_wasm.task_attempts (the attempt history)", createDBPrivilege(who))
	}
	if _, err := EnsureStepCompletion(ctx, conn, true); err != nil {
		return rep, stepError(err, who, "creating "+StepCompleteFunc+" (transactional SQL steps' completion)", createDBPrivilege(who))
	}
	return rep, nil
}

// installLocked installs pgmq, realtime.send and the migrations under the install lock.
func installLocked(ctx context.Context, conn *pgx.Conn, opts Options, migrations *Migrations, who identity, rep *Report) error {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, LockKeyInstall); err != nil {
		return fmt.Errorf("taking the install lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, LockKeyInstall)
	if err := installPgmq(ctx, conn, opts, who, rep); err != nil {
		return err
	}
	if err := installRealtime(ctx, conn, who, rep); err != nil {
		return err
	}
	return applyMigrations(ctx, conn, migrations, who, rep)
}

type identity struct {
	user, database, serverVersion string
	serverVersionNum              int
	superuser                     bool
}

func whoAmI(ctx context.Context, conn *pgx.Conn) (identity, error) {
	var id identity
	err := conn.QueryRow(ctx, `
		SELECT current_user, current_database(), current_setting('server_version'),
		       current_setting('server_version_num')::int,
		       (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)`,
	).Scan(&id.user, &id.database, &id.serverVersion, &id.serverVersionNum, &id.superuser)
	if err != nil {
		return id, fmt.Errorf("reading the server identity: %w", err)
	}
	return id, nil
}

// stepError names the step that failed and, for a permission error, the privilege it needs.
func stepError(err error, who identity, step, privilege string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return wrapf(err, "no permission %s: user %q needs %s (server said: %s)", step, who.user, privilege, pgErr.Message)
	}
	return fmt.Errorf("%s: %w", step, err)
}

func createDBPrivilege(who identity) string {
	return fmt.Sprintf("the CREATE privilege on database %q (GRANT CREATE ON DATABASE %s TO %s)",
		who.database, pgx.Identifier{who.database}.Sanitize(), pgx.Identifier{who.user}.Sanitize())
}

// installPgmq makes sure a usable pgmq exists (see LayerMode) and fills rep.Pgmq*.
func installPgmq(ctx context.Context, conn *pgx.Conn, opts Options, who identity, rep *Report) error {
	st, err := readPgmqState(ctx, conn)
	if err != nil {
		return err
	}
	switch st.Installed.Kind {
	case PgmqLayer:
		if want := opts.Layer; (want == LayerExtension && !st.Installed.Extension) || (want == LayerSchema && st.Installed.Extension) {
			return fmt.Errorf("%s is already installed; it cannot become a %s here (drop schema pgmq first)", st.Installed, want)
		}
		switch st.Installed.Version {
		case LayerVersion:
			// A restored extension's scripts rebuilt the dispatchers before its queue list
			// came back: name the queues they miss (pgmq._undispatched), else change nothing.
			if _, err := conn.Exec(ctx, `SELECT pgmq._lock_queues();
				SELECT pgmq._rebuild_dispatchers() WHERE EXISTS (SELECT FROM pgmq._undispatched())`); err != nil {
				return stepError(err, who, "rebuilding the pgmq layer's queue dispatchers", "to own the pgmq functions")
			}
			rep.Pgmq, rep.PgmqAction = st.Installed, "kept"
			return nil
		case baseLayerVersion:
			// An update that cannot be made leaves the first version, which works (its
			// statements are planned at every call): the rest of the install goes on.
			if err := updateLayer(ctx, conn, opts, st.Installed, who, rep); err != nil {
				rep.Pgmq, rep.PgmqAction = st.Installed, "kept"
				rep.PgmqNote = fmt.Sprintf("not updated to %s, the first version works on: %v", LayerVersion, err)
			}
			return nil
		}
		return fmt.Errorf("%s is installed but this pgflow-wasm ships layer %s and has no path from it (a newer pgflow-wasm installed it?)", st.Installed, LayerVersion)
	case PgmqReal:
		if opts.Layer != LayerAuto {
			return fmt.Errorf("%s is installed: the pgflow-wasm layer is not needed (use auto mode)", st.Installed)
		}
		if err := checkRealVersion(st.Installed.Version, "installed", st); err != nil {
			return err
		}
		rep.Pgmq, rep.PgmqAction = st.Installed, "kept"
		return nil
	case PgmqForeignSchema:
		if !st.Headers {
			return &PgmqTooOldError{Version: "(plain schema, version unknown)", Where: "installed",
				Hint: "its pgmq.message_record has no headers column"}
		}
		rep.Pgmq, rep.PgmqAction = st.Installed, "kept"
		return nil
	}

	if opts.Layer == LayerAuto && st.Available.Version != "" && !st.Available.Ours {
		if err := checkRealVersion(st.Available.Version, "available", st); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS pgmq; CREATE EXTENSION IF NOT EXISTS pgmq WITH SCHEMA pgmq`)
		if err != nil {
			return stepError(err, who, "creating the pgmq extension the server offers",
				"superuser rights or the CREATE privilege on the database, as pgmq's control file asks")
		}
		rep.Pgmq = Pgmq{Kind: PgmqReal, Version: st.Available.Version, Extension: true}
		rep.PgmqAction = "created"
		return nil
	}

	if opts.Layer != LayerSchema {
		dir, err := layerExtensionDir(ctx, conn, opts)
		switch {
		case err == nil && opts.Layer == LayerAuto && opts.ExtensionDir == "" && !ownedExtensionDir(dir):
			rep.PgmqNote = fmt.Sprintf("not as an extension: %s is not an extension folder pgflow-wasm created, and a file "+
				"there would be offered to every cluster on this host (--pgmq extension writes there anyway)", dir)
		case err == nil:
			err = installLayerExtension(ctx, conn, dir)
		}
		if err == nil && rep.PgmqNote == "" {
			rep.Pgmq = Pgmq{Kind: PgmqLayer, Version: LayerVersion, Extension: true}
			rep.PgmqAction, rep.ExtensionDir = "installed", dir
			return nil
		}
		if err != nil && opts.Layer == LayerExtension {
			return stepError(err, who, "installing the pgflow-wasm pgmq layer as an extension", createDBPrivilege(who))
		}
		if err != nil {
			rep.PgmqNote = "not as an extension: " + err.Error()
		}
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS pgmq;\n"+layerSQL()); err != nil {
			return stepError(err, who, "installing the pgflow-wasm pgmq layer into schema pgmq", createDBPrivilege(who))
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep.Pgmq = Pgmq{Kind: PgmqLayer, Version: LayerVersion}
	rep.PgmqAction = "installed"
	return nil
}

// checkRealVersion refuses a real pgmq older than MinPgmqVersion.
func checkRealVersion(version, where string, st pgmqState) error {
	ok, parsed := versionAtLeast(version, MinPgmqVersion)
	if !parsed {
		if where == "installed" && !st.Headers {
			return &PgmqTooOldError{Version: version, Where: where}
		}
		return nil // an unusual version string: pgflow's own migration checks the headers column
	}
	if ok {
		return nil
	}
	e := &PgmqTooOldError{Version: version, Where: where}
	if where == "installed" {
		if newer, _ := versionAtLeast(st.Available.Version, MinPgmqVersion); newer && !st.Available.Ours {
			e.Hint = fmt.Sprintf("the server has %s: run ALTER EXTENSION pgmq UPDATE", st.Available.Version)
		}
	} else {
		e.Hint = "the server offers no newer pgmq: install pgmq >= " + MinPgmqVersion + " on the server"
	}
	return e
}

// layerExtensionDir is where the layer's extension files would go: Options.ExtensionDir, else
// the server's own extension folder.
func layerExtensionDir(ctx context.Context, conn *pgx.Conn, opts Options) (string, error) {
	if opts.ExtensionDir != "" {
		return opts.ExtensionDir, nil
	}
	return serverExtensionDir(ctx, conn)
}

// installLayerExtension writes our extension files into dir and runs CREATE EXTENSION. On
// failure nothing is left in the database and only files this call created are removed.
func installLayerExtension(ctx context.Context, conn *pgx.Conn, dir string) error {
	created, err := writeExtensionFiles(dir)
	if err != nil {
		return err
	}
	undo := func() {
		for _, f := range created {
			os.Remove(f)
		}
	}
	var version, comment *string
	err = conn.QueryRow(ctx, `SELECT default_version, comment FROM pg_catalog.pg_available_extensions WHERE name = 'pgmq'`).
		Scan(&version, &comment)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		undo()
		return err
	}
	if version == nil || *version != LayerVersion || comment == nil || !strings.HasPrefix(*comment, LayerCommentPrefix) {
		undo()
		return fmt.Errorf("the server does not read extension files from %s (it is not this server's extension folder)", dir)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS pgmq; CREATE EXTENSION pgmq WITH SCHEMA pgmq VERSION '%s'`, LayerVersion))
		if err != nil {
			return fmt.Errorf("CREATE EXTENSION pgmq failed: %w", err)
		}
		return nil
	})
}

// updateLayer takes an installed layer from baseLayerVersion to LayerVersion in one
// transaction: ALTER EXTENSION UPDATE (after writing the update script beside the control
// file) in extension form, the update script itself in plain-schema form. Queues and their
// messages stay where they are; only functions change.
func updateLayer(ctx context.Context, conn *pgx.Conn, opts Options, installed Pgmq, who identity, rep *Report) error {
	step := fmt.Sprintf("updating the pgflow-wasm pgmq layer from %s to %s", installed.Version, LayerVersion)
	update, dir := layerUpdateSQL(), ""
	if installed.Extension {
		var err error
		if dir, err = layerExtensionDir(ctx, conn, opts); err == nil {
			_, err = writeExtensionFiles(dir)
		}
		if err != nil {
			return fmt.Errorf("%s: the extension's update script cannot be written: %w", step, err)
		}
		update = fmt.Sprintf(`ALTER EXTENSION pgmq UPDATE TO '%s'`, LayerVersion)
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, update); err != nil {
			return stepError(err, who, step, "to own the pgmq schema and its functions")
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep.Pgmq = Pgmq{Kind: PgmqLayer, Version: LayerVersion, Extension: installed.Extension}
	rep.PgmqAction, rep.ExtensionDir = "updated", dir
	return nil
}
