package schema

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// pgflow keeps no version in the database. What a worker must know is which protocol its
// functions speak, and that can be read off the catalogue: each release that changed what a
// worker sees added a column, a function or a status. The probe below was checked against
// databases at every release from 0.8.1 to 0.17.0 and at pgflow's main of 2026-10-01
// (docs/database.md); pgflow-wasm speaks all of them and refuses a newer pgflow rather than
// guess.

// Protocol is the pgflow a database has, as far as a worker is concerned.
type Protocol struct {
	// Version is the oldest release whose catalogue this is: "0.8", "0.10", "0.11", "0.12",
	// "0.13.0", "0.13.2", "0.14", "0.15.0", "0.15.1", "0.16", "0.17", "main-20261001";
	// "" when pgflow is not installed.
	Version string
	// FlowInput (0.12+): start_tasks returns flow_input, and handler input leaves out "run".
	FlowInput bool
	// Requeue (0.13.2+): requeue_stalled_tasks and step_tasks.permanently_stalled_at.
	Requeue bool
	// Conditions (0.14+): step conditions and skipped steps.
	Conditions bool
	// StoppedAt (0.10+): workers.stopped_at and mark_worker_stopped.
	StoppedAt bool
	// StartModes (0.15.0+): worker_functions.start_mode; a worker that starts itself
	// registers as a 'process' function, which pgflow's ensure_workers never pings.
	StartModes bool
	// Lifecycle (0.15.1+): tasks of a failed run become `cancelled` and tasks of a skipped
	// step `skipped`; start_tasks sets each message's visibility itself and returns a task
	// only to the caller that claimed it; late outcomes change nothing.
	Lifecycle bool
	// NoLegacyCompile (0.16+): ensure_flow_compiled lost its allow_data_loss overload.
	NoLegacyCompile bool
	// QueueNames (0.17+): steps and tasks carry queue_name, start_tasks takes the queue
	// (and, for a flow with per-step queues, the step), slugs follow stricter rules, and a
	// flow may have a queue per step (flows.queue_mode = 'step').
	QueueNames bool
	// Telemetry (main of 2026-10-01): schema pgflow_telemetry, workers.pgflow_version.
	Telemetry bool
	// Newer names signs of a release after the newest pgflow-wasm knows; "" when none.
	Newer string
}

// SupportedPgflow is the range of pgflow releases pgflow-wasm speaks.
const SupportedPgflow = "0.8.1 through 0.17.0, and pgflow's main of 2026-10-01"

// knownTaskStatuses are the step_tasks statuses of every release pgflow-wasm speaks.
var knownTaskStatuses = map[string]bool{"queued": true, "started": true, "completed": true, "failed": true,
	"skipped": true, "cancelled": true}

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
		return fmt.Errorf("this database has a pgflow newer than any pgflow-wasm knows (%s): pgflow-wasm speaks pgflow %s and will not guess a newer protocol",
			p.Newer, SupportedPgflow)
	}
	return nil
}

func (p Protocol) String() string {
	switch {
	case !p.Installed():
		return "not installed"
	case p.Newer != "":
		return "newer than pgflow-wasm knows (" + p.Newer + ")"
	case p.Version == "older":
		return "older than 0.8"
	case p.Version == "main-20261001":
		return "main of 2026-10-01 (after 0.17.0)"
	}
	return p.Version
}

// AtLeast reports whether the database's pgflow is release v ("0.14", "0.17"...) or newer.
func (p Protocol) AtLeast(v string) bool {
	if !p.Installed() || p.Version == "older" {
		return false
	}
	return versionRank(p.Version) >= versionRank(v)
}

// versionOrder lists the Version values, oldest first.
var versionOrder = []string{"0.8", "0.10", "0.11", "0.12", "0.13.0", "0.13.2", "0.14", "0.15.0", "0.15.1", "0.16", "0.17", "main-20261001"}

func versionRank(v string) int {
	for i, o := range versionOrder {
		if o == v {
			return i
		}
	}
	return -1
}

// detectSQL reads every capability in one row. to_regprocedure needs a function's exact
// argument list: on 0.17 start_tasks has five arguments (the fifth has a default).
const detectSQL = `
with col as (
  select c.relname, a.attname from pg_catalog.pg_attribute a
  join pg_catalog.pg_class c on c.oid = a.attrelid
  join pg_catalog.pg_namespace n on n.oid = c.relnamespace
  where n.nspname = 'pgflow' and a.attnum > 0 and not a.attisdropped),
sig as (
  select
    to_regprocedure('pgflow.start_tasks(text,bigint[],uuid)') is not null as start3,
    to_regprocedure('pgflow.start_tasks(text,bigint[],uuid,text,text)') is not null as start5,
    to_regprocedure('pgflow.start_tasks(text,bigint[],uuid,text)') is not null as start4,
    (select count(*) from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'pgflow' and p.proname = 'start_tasks') as start_any,
    coalesce((select pg_catalog.pg_get_constraintdef(con.oid) from pg_catalog.pg_constraint con
              where con.conrelid = to_regclass('pgflow.step_tasks') and con.conname = 'valid_status'), '') as statuses,
    to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb,boolean)') is not null as ensure3,
    to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb)') is not null as ensure2,
    to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb,text,jsonb)') is not null as ensure4)
select
  sig.start3 or sig.start5 or sig.start_any > 0,
  exists (select 1 from col where relname = 'steps' and attname = 'step_type'),
  exists (select 1 from col where relname = 'step_task_record' and attname = 'flow_input'),
  to_regprocedure('pgflow.requeue_stalled_tasks()') is not null,
  exists (select 1 from col where relname = 'step_states' and attname = 'output'),
  exists (select 1 from col where relname = 'steps' and attname = 'required_input_pattern'),
  exists (select 1 from col where relname = 'workers' and attname = 'stopped_at'),
  exists (select 1 from col where relname = 'worker_functions' and attname = 'start_mode'),
  sig.statuses,
  sig.ensure3, sig.ensure2, sig.ensure4,
  sig.start3, sig.start4, sig.start5, sig.start_any,
  exists (select 1 from col where relname = 'step_tasks' and attname = 'queue_name'),
  to_regnamespace('pgflow_telemetry') is not null,
  coalesce((select pg_catalog.pg_get_constraintdef(con.oid) from pg_catalog.pg_constraint con
            where con.conrelid = to_regclass('pgflow.flows') and con.conname like '%queue_mode%' limit 1), '')
from sig`

// DetectPgflow reads the protocol off the catalogue.
func DetectPgflow(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (Protocol, error) {
	var p Protocol
	var installed, mapSteps, stepOutput, ensure3, ensure2, ensure4, start3, start4, start5, queueCol bool
	var startAny int
	var statuses, queueModes string
	err := q.QueryRow(ctx, detectSQL).Scan(&installed, &mapSteps, &p.FlowInput, &p.Requeue, &stepOutput, &p.Conditions,
		&p.StoppedAt, &p.StartModes, &statuses, &ensure3, &ensure2, &ensure4, &start3, &start4, &start5, &startAny,
		&queueCol, &p.Telemetry, &queueModes)
	if err != nil {
		return p, fmt.Errorf("reading which pgflow this database has: %w", err)
	}
	if !installed {
		return p, nil
	}
	var newer []string
	for _, s := range quotedWords(statuses) {
		if !knownTaskStatuses[s] {
			newer = append(newer, "tasks have a status "+s)
		}
		if s == "cancelled" {
			p.Lifecycle = true
		}
	}
	for _, m := range quotedWords(queueModes) {
		if m != "flow" && m != "step" {
			newer = append(newer, "flows have a queue mode "+m)
		}
	}
	p.QueueNames = start5 && queueCol
	p.NoLegacyCompile = p.Requeue && !ensure3 && (ensure2 || ensure4)
	switch {
	case start4 && !start5:
		newer = append(newer, "start_tasks takes a queue name but no step (an unreleased 0.17 pre-release)")
	case !start3 && !start5:
		newer = append(newer, fmt.Sprintf("start_tasks has none of the signatures pgflow-wasm knows (%d overloads)", startAny))
	case start5 && !ensure4:
		newer = append(newer, "ensure_flow_compiled does not take a queue mode")
	}
	p.Newer = strings.Join(newer, "; ")
	switch {
	case !mapSteps:
		p.Version = "older"
	case p.Telemetry:
		p.Version = "main-20261001"
	case p.QueueNames:
		p.Version = "0.17"
	case p.NoLegacyCompile:
		p.Version = "0.16"
	case p.Lifecycle:
		p.Version = "0.15.1"
	case p.StartModes:
		p.Version = "0.15.0"
	case p.Conditions:
		p.Version = "0.14"
	case p.Requeue:
		p.Version = "0.13.2"
	case stepOutput:
		p.Version = "0.13.0"
	case p.FlowInput:
		p.Version = "0.12"
	case ensure3:
		p.Version = "0.11"
	case ensure2:
		p.Version = "0.10"
	default:
		p.Version = "0.8"
	}
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

// StepQueue is the SQL expression, over pgflow.steps aliased as steps, for the queue a step's
// tasks are sent to. pgflow 0.17 and later record it with every step (steps.queue_name: the
// flow's slug lower-cased, or the step's own queue in a flow with a queue per step); before,
// a flow has one queue, named after its slug as written. This is the one place that rule is
// written (the worker's fetches, compile's notifications and the dashboard's counts use it).
func (p Protocol) StepQueue(steps string) string {
	if p.QueueNames {
		return steps + ".queue_name"
	}
	return steps + ".flow_slug"
}
