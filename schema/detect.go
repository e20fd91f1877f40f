package schema

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// pgflow keeps no version in the database. What a worker must know is which protocol its
// functions speak, and that can be read off the catalogue: each release that changed what a
// worker sees added a column or a function. The probe below was checked against databases at
// every release from 0.8.1 to 0.14.1 (docs/database.md); pgflow-wasm speaks all of them and
// refuses a newer pgflow rather than guess.

// Protocol is the pgflow a database has, as far as a worker is concerned.
type Protocol struct {
	// Version is the oldest release whose catalogue this is: "0.8", "0.10", "0.11", "0.12",
	// "0.13.0", "0.13.2", "0.14"; "" when pgflow is not installed.
	Version string
	// FlowInput (0.12+): start_tasks returns flow_input, and handler input leaves out "run".
	FlowInput bool
	// Requeue (0.13.2+): requeue_stalled_tasks and step_tasks.permanently_stalled_at.
	Requeue bool
	// Conditions (0.14): step conditions and skipped steps.
	Conditions bool
	// StoppedAt (0.10+): workers.stopped_at and mark_worker_stopped.
	StoppedAt bool
	// Newer names signs of a release after 0.14.1, which pgflow-wasm does not speak; "" when none.
	Newer string
}

// SupportedPgflow is the range of pgflow releases pgflow-wasm speaks.
const SupportedPgflow = "0.8.1 through 0.14.1"

// Installed reports whether the database has pgflow at all.
func (p Protocol) Installed() bool { return p.Version != "" }

// Supported returns nil when pgflow-wasm speaks this protocol, else an error that names what
// was found and what is supported.
func (p Protocol) Supported() error {
	switch {
	case !p.Installed():
		return fmt.Errorf("this database has no pgflow schema: run `pgflow-wasm db install` first")
	case p.Version == "older":
		return fmt.Errorf("this database has a pgflow older than 0.8 (no map steps): pgflow-wasm speaks pgflow %s", SupportedPgflow)
	case p.Newer != "":
		return fmt.Errorf("this database has a pgflow newer than 0.14.1 (%s): pgflow-wasm speaks pgflow %s and will not guess a newer protocol",
			p.Newer, SupportedPgflow)
	}
	return nil
}

func (p Protocol) String() string {
	switch {
	case !p.Installed():
		return "not installed"
	case p.Newer != "":
		return "newer than 0.14.1 (" + p.Newer + ")"
	case p.Version == "older":
		return "older than 0.8"
	}
	return p.Version
}

// DetectPgflow reads the protocol off the catalogue.
func DetectPgflow(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (Protocol, error) {
	var p Protocol
	var version *string
	var start4, dropped3, statuses string
	err := q.QueryRow(ctx, `
		with col as (
		  select c.relname, a.attname from pg_catalog.pg_attribute a
		  join pg_catalog.pg_class c on c.oid = a.attrelid
		  join pg_catalog.pg_namespace n on n.oid = c.relnamespace
		  where n.nspname = 'pgflow' and a.attnum > 0 and not a.attisdropped)
		select case
		  when to_regprocedure('pgflow.start_tasks(text,bigint[],uuid)') is null
		       and to_regprocedure('pgflow.start_tasks(text,bigint[],uuid,text)') is null then null
		  when not exists (select 1 from col where relname = 'steps' and attname = 'step_type') then 'older'
		  when exists (select 1 from col where relname = 'steps' and attname = 'required_input_pattern') then '0.14'
		  when to_regprocedure('pgflow.requeue_stalled_tasks()') is not null then '0.13.2'
		  when exists (select 1 from col where relname = 'step_states' and attname = 'output') then '0.13.0'
		  when exists (select 1 from col where relname = 'step_task_record' and attname = 'flow_input') then '0.12'
		  when to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb,boolean)') is not null then '0.11'
		  when to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb)') is not null then '0.10'
		  else '0.8' end,
		  exists (select 1 from col where relname = 'step_task_record' and attname = 'flow_input'),
		  to_regprocedure('pgflow.requeue_stalled_tasks()') is not null,
		  exists (select 1 from col where relname = 'steps' and attname = 'required_input_pattern'),
		  exists (select 1 from col where relname = 'workers' and attname = 'stopped_at'),
		  coalesce(to_regprocedure('pgflow.start_tasks(text,bigint[],uuid,text)')::text, ''),
		  case when to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb)') is not null
		        and to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb,boolean)') is null
		        and to_regprocedure('pgflow.requeue_stalled_tasks()') is not null
		       then 'ensure_flow_compiled lost its allow_data_loss parameter (0.16)' else '' end,
		  coalesce((select pg_catalog.pg_get_constraintdef(con.oid) from pg_catalog.pg_constraint con
		            where con.conrelid = to_regclass('pgflow.step_tasks') and con.conname = 'valid_status'), '')`).
		Scan(&version, &p.FlowInput, &p.Requeue, &p.Conditions, &p.StoppedAt, &start4, &dropped3, &statuses)
	if err != nil {
		return p, fmt.Errorf("reading which pgflow this database has: %w", err)
	}
	if version != nil {
		p.Version = *version
	}
	var newer []string
	if start4 != "" {
		newer = append(newer, "start_tasks takes a queue name (0.17)")
	}
	if dropped3 != "" {
		newer = append(newer, dropped3)
	}
	for _, s := range quotedWords(statuses) {
		if s != "queued" && s != "started" && s != "completed" && s != "failed" {
			newer = append(newer, "tasks have a status "+s)
		}
	}
	p.Newer = strings.Join(newer, "; ")
	return p, nil
}

// quotedWords returns the 'quoted' words of a constraint definition.
func quotedWords(def string) []string {
	var out []string
	for {
		i := strings.IndexByte(def, '\'')
		if i < 0 {
			return out
		}
		def = def[i+1:]
		j := strings.IndexByte(def, '\'')
		if j < 0 {
			return out
		}
		out = append(out, def[:j])
		def = def[j+1:]
	}
}
