// Package compile turns flows.yaml into pgflow flow definitions: pgflow.create_flow and
// pgflow.add_step in dependency order, in one transaction.
//
// pgflow flows are immutable: create_flow and add_step insert only what is absent, so a
// changed shape would silently keep the old one. Compile therefore compares what the database
// has with the file: the same shape is a no-op; a different shape (steps, dependencies, step
// types) is refused with what differs; different options (attempts, delays, timeouts) are
// reported, and written only when asked (UpdateOptions).
package compile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Options controls Compile.
type Options struct {
	// UpdateOptions writes option differences (max_attempts, base_delay, timeout,
	// start_delay) into pgflow.flows and pgflow.steps instead of only reporting them.
	UpdateOptions bool
	// DryRun does everything in a transaction that is rolled back: the reports say what
	// would change, nothing does.
	DryRun bool
	// NotifyInserts turns on insert notifications for the flows' queues (as a worker under
	// the notify signal does at start, which takes the queue table's owner): run by the
	// owner, it lets a worker login that owns nothing listen instead of polling.
	NotifyInserts bool
}

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// Action is what Compile did with one flow.
type Action string

// Actions.
const (
	Created        Action = "created"
	Unchanged      Action = "unchanged"
	OptionsDiffer  Action = "options differ (not updated: pass --update-options)"
	OptionsUpdated Action = "options updated"
)

// wouldBe says each action of a dry run.
var wouldBe = map[Action]Action{
	Created:        "would be created",
	Unchanged:      Unchanged,
	OptionsDiffer:  OptionsDiffer,
	OptionsUpdated: "options would be updated",
}

// FlowReport tells what happened to one flow.
type FlowReport struct {
	Slug    string
	Action  Action
	Options []string // option differences, "step x: timeout 30 in the database, 5 in the file"
	// External are the steps another worker serves (flows.yaml `external: true`).
	External []string
	// NotifyErr says why a queue of the flow could not be made to notify on inserts
	// (Options.NotifyInserts); a worker polls such a queue.
	NotifyErr error
}

// lockKey serialises concurrent compiles (several workers starting at once).
const lockKey = "pgflow-wasm:compile"

// Compile creates or checks every flow of the file, in one transaction.
func Compile(ctx context.Context, pool *pgxpool.Pool, file *flowfile.File, opts Options) ([]FlowReport, error) {
	var reports []FlowReport
	var proto schema.Protocol
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext($1))`, lockKey); err != nil {
			return err
		}
		var err error
		proto, err = schema.DetectPgflow(ctx, tx)
		if err != nil {
			return err
		}
		if err := proto.Supported(); err != nil {
			return err
		}
		if err := conditionsSupported(file, proto); err != nil {
			return err
		}
		if err := splitSupported(file, proto); err != nil {
			return err
		}
		for _, fl := range file.Flows {
			r, err := compileFlow(ctx, tx, fl, opts, proto)
			if err != nil {
				return err
			}
			reports = append(reports, r)
		}
		if opts.DryRun {
			return errDryRun
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDryRun) {
		return nil, err
	}
	if opts.DryRun {
		for i := range reports {
			reports[i].Action = wouldBe[reports[i].Action]
		}
		return reports, nil
	}
	if opts.NotifyInserts {
		for i := range reports {
			reports[i].NotifyErr = notifyInserts(ctx, pool, proto, reports[i].Slug)
		}
	}
	return reports, nil
}

// notifyInserts turns on insert notifications for every queue of a compiled flow.
func notifyInserts(ctx context.Context, pool *pgxpool.Pool, proto schema.Protocol, slug string) error {
	rows, err := pool.Query(ctx, `select distinct `+proto.StepQueue("s")+` from pgflow.steps s where s.flow_slug = $1`, slug)
	if err != nil {
		return err
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, q := range queues {
		if _, err := poller.EnableInsertNotify(ctx, pool, q); err != nil {
			return fmt.Errorf("queue %s: %w", q, err)
		}
	}
	return nil
}

func compileFlow(ctx context.Context, tx pgx.Tx, fl *flowfile.Flow, opts Options, proto schema.Protocol) (FlowReport, error) {
	r := FlowReport{Slug: fl.Slug}
	for _, s := range fl.Steps {
		if s.External {
			r.External = append(r.External, s.Slug)
		}
	}
	if proto.QueueNames {
		// pgflow 0.17's own compilers (its workers at start, create_flow) take this lock per
		// flow: a flow compiled by both sides at once is created once.
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(1, hashtext(lower($1)))`, fl.Slug); err != nil {
			return r, err
		}
	}
	db, err := loadFlow(ctx, tx, fl.Slug, proto)
	if err != nil {
		return r, err
	}
	if db == nil {
		create := createFlow
		if fl.Split() {
			create = createStepQueuedFlow
		}
		if err := create(ctx, tx, fl, proto); err != nil {
			return r, err
		}
		r.Action = Created
		return r, nil
	}
	if diffs := shapeDiff(fl, db); len(diffs) > 0 {
		return r, &pgflowtype.ShapeError{Flow: fl.Slug, Differences: diffs}
	}
	if fl.Split() && db.queueMode != "step" {
		return r, &pgflowtype.ShapeError{Flow: fl.Slug, Differences: []string{fmt.Sprintf(
			"some steps are served by another worker (external: true), which needs a queue per step; the database has one queue for the whole flow "+
				"(queue mode %q): drop the flow while no run is in flight (`pgflow-wasm flow drop %s`) and compile again", db.queueMode, fl.Slug)}}
	}
	r.Options = optionDiff(fl, db)
	switch {
	case len(r.Options) == 0:
		r.Action = Unchanged
	case opts.UpdateOptions:
		if err := updateOptions(ctx, tx, fl); err != nil {
			return r, err
		}
		r.Action = OptionsUpdated
	default:
		r.Action = OptionsDiffer
	}
	return r, nil
}

// splitSupported refuses flows with external steps on a pgflow older than 0.17, where every
// task of a flow comes from one queue and two kinds of worker would take each other's tasks.
func splitSupported(file *flowfile.File, proto schema.Protocol) error {
	if proto.QueueNames {
		return nil
	}
	for _, fl := range file.Flows {
		if fl.Split() {
			return fmt.Errorf("%s:%d: flow %q has steps served by another worker (external: true), which needs a queue per step: "+
				"pgflow 0.17 or newer; this database has pgflow %s, where every task of a flow shares one queue",
				file.Path, fl.Line, fl.Slug, proto)
		}
	}
	return nil
}

// conditionsSupported refuses step conditions on a pgflow older than 0.14.
func conditionsSupported(file *flowfile.File, proto schema.Protocol) error {
	if proto.Conditions {
		return nil
	}
	for _, fl := range file.Flows {
		for _, s := range fl.Steps {
			if s.HasConditions() {
				return fmt.Errorf("%s:%d: flow %q step %q uses step conditions (if, if_not, when_unmet, when_exhausted), "+
					"which need pgflow 0.14; this database has pgflow %s: remove them, or upgrade pgflow (`pgflow-wasm db install --migrations DIR`)",
					file.Path, s.Line, fl.Slug, s.Slug, proto)
			}
		}
	}
	return nil
}

func createFlow(ctx context.Context, tx pgx.Tx, fl *flowfile.Flow, proto schema.Protocol) error {
	// All three options always explicit: the function's base_delay default (5) disagrees
	// with the table's and the documentation's (1).
	if _, err := tx.Exec(ctx, `select pgflow.create_flow(flow_slug => $1, max_attempts => $2, base_delay => $3, timeout => $4)`,
		fl.Slug, fl.MaxAttempts, fl.BaseDelay, fl.Timeout); err != nil {
		return fmt.Errorf("create_flow(%s): %w", fl.Slug, err)
	}
	for _, s := range fl.Steps { // already in dependency order
		deps := s.DependsOn
		if deps == nil {
			deps = []string{}
		}
		sql := `select pgflow.add_step(flow_slug => $1, step_slug => $2, deps_slugs => $3::text[],
			max_attempts => $4::int, base_delay => $5::int, timeout => $6::int, start_delay => $7::int, step_type => $8)`
		args := []any{fl.Slug, s.Slug, deps, s.MaxAttempts, s.BaseDelay, s.Timeout, s.StartDelay, s.Type}
		if s.HasConditions() {
			// pgflow 0.14 (conditionsSupported checked it). Its modes are NOT NULL: an unset one
			// is sent as pgflow's default.
			c := conditionsOf(s)
			sql = `select pgflow.add_step(flow_slug => $1, step_slug => $2, deps_slugs => $3::text[],
				max_attempts => $4::int, base_delay => $5::int, timeout => $6::int, start_delay => $7::int, step_type => $8,
				required_input_pattern => $9::jsonb, forbidden_input_pattern => $10::jsonb, when_unmet => $11, when_exhausted => $12)`
			args = append(args, c.ifPattern, c.ifNot, c.whenUnmet, c.whenExhausted)
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("add_step(%s.%s): %w", fl.Slug, s.Slug, err)
		}
	}
	return nil
}

// createStepQueuedFlow creates a flow with a queue per step through pgflow 0.17's
// ensure_flow_compiled (create_flow and add_step make flow queues only), so each worker of a
// split flow reads only its own steps' queues.
func createStepQueuedFlow(ctx context.Context, tx pgx.Tx, fl *flowfile.Flow, _ schema.Protocol) error {
	shape, err := json.Marshal(shapeOf(fl))
	if err != nil {
		return err
	}
	var result struct {
		Status      string   `json:"status"`
		Differences []string `json:"differences"`
	}
	var raw []byte
	if err := tx.QueryRow(ctx, `select pgflow.ensure_flow_compiled($1, $2::jsonb, 'step')`, fl.Slug, string(shape)).Scan(&raw); err != nil {
		return fmt.Errorf("ensure_flow_compiled(%s, per-step queues): %w", fl.Slug, err)
	}
	if err := json.Unmarshal(raw, &result); err != nil {
		return fmt.Errorf("ensure_flow_compiled(%s) answered %s: %w", fl.Slug, raw, err)
	}
	switch result.Status {
	case "compiled", "verified":
		return nil
	case "mismatch":
		return &pgflowtype.ShapeError{Flow: fl.Slug, Differences: result.Differences}
	}
	return fmt.Errorf("ensure_flow_compiled(%s) answered %s", fl.Slug, raw)
}

// shape is pgflow's flow shape (the JSON its TypeScript DSL compiles a flow to): the steps
// in order with their types, dependencies and conditions, and the options used on creation.
type shape struct {
	Options map[string]int `json:"options"`
	Steps   []shapeStep    `json:"steps"`
}

type shapeStep struct {
	Slug                  string         `json:"slug"`
	StepType              string         `json:"stepType"`
	Dependencies          []string       `json:"dependencies"`
	WhenUnmet             string         `json:"whenUnmet"`
	WhenExhausted         string         `json:"whenExhausted"`
	RequiredInputPattern  shapePattern   `json:"requiredInputPattern"`
	ForbiddenInputPattern shapePattern   `json:"forbiddenInputPattern"`
	Options               map[string]int `json:"options,omitempty"`
}

type shapePattern struct {
	Defined bool            `json:"defined"`
	Value   json.RawMessage `json:"value,omitempty"`
}

func shapeOf(fl *flowfile.Flow) shape {
	sh := shape{Options: map[string]int{"maxAttempts": fl.MaxAttempts, "baseDelay": fl.BaseDelay, "timeout": fl.Timeout}}
	for _, s := range fl.Steps {
		c := conditionsOf(s)
		st := shapeStep{Slug: s.Slug, StepType: s.Type, Dependencies: sorted(s.DependsOn), WhenUnmet: c.whenUnmet, WhenExhausted: c.whenExhausted,
			RequiredInputPattern: patternOf(c.ifPattern), ForbiddenInputPattern: patternOf(c.ifNot), Options: map[string]int{}}
		for key, v := range map[string]*int{"maxAttempts": s.MaxAttempts, "baseDelay": s.BaseDelay, "timeout": s.Timeout, "startDelay": s.StartDelay} {
			if v != nil {
				st.Options[key] = *v
			}
		}
		sh.Steps = append(sh.Steps, st)
	}
	return sh
}

func patternOf(p *string) shapePattern {
	if p == nil {
		return shapePattern{}
	}
	return shapePattern{Defined: true, Value: json.RawMessage(*p)}
}

// dbFlow is a flow as pgflow stores it.
type dbFlow struct {
	maxAttempts, baseDelay, timeout int
	queueMode                       string // "flow", or "step" (pgflow 0.17+: a queue per step)
	steps                           map[string]*dbStep
}

type dbStep struct {
	stepType                                    string
	deps                                        []string
	maxAttempts, baseDelay, timeout, startDelay *int
	conditions                                  conditions // pgflow 0.14; the defaults before
}

// conditions is a step's condition columns as pgflow 0.14 stores them (patterns as jsonb
// text, "" for NULL).
type conditions struct {
	ifPattern, ifNot         *string
	whenUnmet, whenExhausted string
}

// conditionsOf is what the file asks, with pgflow's defaults for what it leaves out.
func conditionsOf(s *flowfile.Step) conditions {
	c := conditions{whenUnmet: flowfile.Skip, whenExhausted: flowfile.Fail}
	if s.If != nil {
		v := string(s.If)
		c.ifPattern = &v
	}
	if s.IfNot != nil {
		v := string(s.IfNot)
		c.ifNot = &v
	}
	if s.WhenUnmet != "" {
		c.whenUnmet = s.WhenUnmet
	}
	if s.WhenExhausted != "" {
		c.whenExhausted = s.WhenExhausted
	}
	return c
}

func loadFlow(ctx context.Context, tx pgx.Tx, slug string, proto schema.Protocol) (*dbFlow, error) {
	f := &dbFlow{steps: map[string]*dbStep{}}
	mode := `'flow'`
	if proto.QueueNames {
		mode = `queue_mode`
	}
	err := tx.QueryRow(ctx, `select opt_max_attempts, opt_base_delay, opt_timeout, `+mode+` from pgflow.flows where flow_slug = $1`, slug).
		Scan(&f.maxAttempts, &f.baseDelay, &f.timeout, &f.queueMode)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading flow %s: %w", slug, err)
	}
	conds := `null::text, null::text, 'skip', 'fail'` // before 0.14: what 0.14 reads as no condition
	if proto.Conditions {
		conds = `required_input_pattern::text, forbidden_input_pattern::text, when_unmet, when_exhausted`
	}
	rows, err := tx.Query(ctx, `select step_slug, step_type, opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay, `+conds+`
		from pgflow.steps where flow_slug = $1`, slug)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name string
		s := &dbStep{}
		c := &s.conditions
		if err := rows.Scan(&name, &s.stepType, &s.maxAttempts, &s.baseDelay, &s.timeout, &s.startDelay,
			&c.ifPattern, &c.ifNot, &c.whenUnmet, &c.whenExhausted); err != nil {
			rows.Close()
			return nil, err
		}
		f.steps[name] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `select step_slug, dep_slug from pgflow.deps where flow_slug = $1`, slug)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var step, dep string
		if err := rows.Scan(&step, &dep); err != nil {
			return nil, err
		}
		if s := f.steps[step]; s != nil {
			s.deps = append(s.deps, dep)
		}
	}
	return f, rows.Err()
}

func shapeDiff(fl *flowfile.Flow, db *dbFlow) []string {
	var diffs []string
	for _, s := range fl.Steps {
		d, ok := db.steps[s.Slug]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("step %q is in the file but not in the database", s.Slug))
			continue
		}
		if d.stepType != s.Type {
			diffs = append(diffs, fmt.Sprintf("step %q is %s in the file, %s in the database", s.Slug, s.Type, d.stepType))
		}
		want, have := sorted(s.DependsOn), sorted(d.deps)
		if !slices.Equal(want, have) {
			diffs = append(diffs, fmt.Sprintf("step %q depends on [%s] in the file, [%s] in the database",
				s.Slug, strings.Join(want, ", "), strings.Join(have, ", ")))
		}
		diffs = append(diffs, conditionDiff(s.Slug, conditionsOf(s), d.conditions)...)
	}
	var extra []string
	for name := range db.steps {
		if fl.Step(name) == nil {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		diffs = append(diffs, fmt.Sprintf("step %q is in the database but not in the file", name))
	}
	return diffs
}

// conditionDiff compares step conditions: patterns by JSON value, modes by name.
func conditionDiff(step string, file, db conditions) []string {
	var diffs []string
	pattern := func(key string, f, d *string) {
		if !sameJSON(f, d) {
			diffs = append(diffs, fmt.Sprintf("step %q has %s %s in the file, %s in the database", step, key, showJSON(f), showJSON(d)))
		}
	}
	pattern("if", file.ifPattern, db.ifPattern)
	pattern("if_not", file.ifNot, db.ifNot)
	if file.whenUnmet != db.whenUnmet {
		diffs = append(diffs, fmt.Sprintf("step %q has when_unmet %s in the file, %s in the database", step, file.whenUnmet, db.whenUnmet))
	}
	if file.whenExhausted != db.whenExhausted {
		diffs = append(diffs, fmt.Sprintf("step %q has when_exhausted %s in the file, %s in the database", step, file.whenExhausted, db.whenExhausted))
	}
	return diffs
}

func sameJSON(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal([]byte(*a), &x) != nil || json.Unmarshal([]byte(*b), &y) != nil {
		return *a == *b
	}
	return reflect.DeepEqual(x, y)
}

func showJSON(p *string) string {
	if p == nil {
		return "unset"
	}
	return *p
}

func optionDiff(fl *flowfile.Flow, db *dbFlow) []string {
	var diffs []string
	flowOpt := func(name string, dbVal, fileVal int) {
		if dbVal != fileVal {
			diffs = append(diffs, fmt.Sprintf("flow %s: %d in the database, %d in the file", name, dbVal, fileVal))
		}
	}
	flowOpt("max_attempts", db.maxAttempts, fl.MaxAttempts)
	flowOpt("base_delay", db.baseDelay, fl.BaseDelay)
	flowOpt("timeout", db.timeout, fl.Timeout)
	for _, s := range fl.Steps {
		d := db.steps[s.Slug]
		stepOpt := func(name string, dbVal, fileVal *int) {
			if !equalOpt(dbVal, fileVal) {
				diffs = append(diffs, fmt.Sprintf("step %s %s: %s in the database, %s in the file", s.Slug, name, showOpt(dbVal), showOpt(fileVal)))
			}
		}
		stepOpt("max_attempts", d.maxAttempts, s.MaxAttempts)
		stepOpt("base_delay", d.baseDelay, s.BaseDelay)
		stepOpt("timeout", d.timeout, s.Timeout)
		stepOpt("start_delay", d.startDelay, s.StartDelay)
	}
	return diffs
}

func updateOptions(ctx context.Context, tx pgx.Tx, fl *flowfile.Flow) error {
	if _, err := tx.Exec(ctx, `update pgflow.flows set opt_max_attempts = $2, opt_base_delay = $3, opt_timeout = $4 where flow_slug = $1`,
		fl.Slug, fl.MaxAttempts, fl.BaseDelay, fl.Timeout); err != nil {
		return fmt.Errorf("updating options of flow %s: %w", fl.Slug, err)
	}
	for _, s := range fl.Steps {
		if _, err := tx.Exec(ctx, `update pgflow.steps set opt_max_attempts = $3, opt_base_delay = $4, opt_timeout = $5, opt_start_delay = $6
			where flow_slug = $1 and step_slug = $2`, fl.Slug, s.Slug, s.MaxAttempts, s.BaseDelay, s.Timeout, s.StartDelay); err != nil {
			return fmt.Errorf("updating options of step %s.%s: %w", fl.Slug, s.Slug, err)
		}
	}
	return nil
}

func equalOpt(a, b *int) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func showOpt(v *int) string {
	if v == nil {
		return "unset (inherits the flow's)"
	}
	return fmt.Sprint(*v)
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}
