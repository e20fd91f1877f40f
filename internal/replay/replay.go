// Package replay runs a task of the database again, on this machine, writing nothing back:
// the input and context are rebuilt from pgflow's tables as the worker built them, the
// step's module (or a rebuilt one) runs in the same sandbox, with the step's limits and
// capabilities. The way to debug a failed step in seconds.
//
// Nothing is written: no pgflow function is called, and the handler's SQL (a step with
// `sql:`) runs in one transaction that is rolled back at the end. Its HTTP calls do go
// out, as they did in the worker, unless NoHTTP.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/fetched"
	"github.com/pgflow-wasm/pgflow-wasm/internal/sqlsession"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Config names the task and how to run it.
type Config struct {
	Pool   *pgxpool.Pool // the pgflow database
	Flows  *flowfile.File
	Engine sandbox.Engine
	RunID  string
	Step   string
	Index  int
	// Module replaces the step's module (a fixed build); "" runs the one flows.yaml names.
	Module string
	// Timeout replaces the step's timeout; 0 keeps it.
	Timeout time.Duration
	// NoHTTP takes the step's HTTP capability away: its calls fail as for a step without `http`.
	NoHTTP bool
	Log    *slog.Logger
}

// Result is a replay: the task as the database recorded it, and what the handler did now.
type Result struct {
	Task    store.TaskRecord
	Module  string // the module that ran
	Timeout time.Duration
	Run     sandbox.Result
	// Err is the handler's failure (a *sandbox.Error), nil when it succeeded.
	Err error
}

// Reproduced reports whether the replay failed as the task last did: the first lines of
// the two errors are the same but for the folders of the paths they name (the worker may
// have been given flows.yaml by another path; a stack's later lines name a rebuilt module's).
func (r *Result) Reproduced() bool {
	return r.Task.Error != "" && r.Err != nil && firstLine(r.Task.Error) == firstLine(r.Err.Error())
}

// folders matches the folders of a path in a message: "/srv/app/flows.yaml:3" -> "flows.yaml:3".
var folders = regexp.MustCompile(`(?:[^\s("']*/)+`)

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return folders.ReplaceAllString(strings.TrimSpace(s), "")
}

// Task is a task ready to run: as the database recorded it, with its input and context as
// the worker built them.
type Task struct {
	Record  store.TaskRecord
	Context []byte
	Timeout time.Duration
	poller  fetched.Task
}

// Prepare reads the task and rebuilds its context, under timeout (0: the step's).
func Prepare(ctx context.Context, pool *pgxpool.Pool, runID, stepSlug string, index int, timeout time.Duration) (*Task, error) {
	proto, err := schema.DetectPgflow(ctx, pool)
	if err != nil {
		return nil, err
	}
	rec, err := store.New(pool, proto).Task(ctx, runID, stepSlug, index)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = rec.Timeout
	}
	t := fetched.Task{FlowSlug: rec.FlowSlug, RunID: rec.RunID, StepSlug: rec.Step.Slug, TaskIndex: rec.Index,
		MsgID: rec.MsgID, Attempt: max(rec.Attempts, 1), Input: rec.Input, FlowInput: rec.FlowInput, WorkerID: rec.WorkerID}
	workerID := rec.WorkerID
	if workerID == "" {
		workerID = "00000000-0000-0000-0000-000000000000" // never started
	}
	shape := step.Shape(&flowfile.Step{Type: rec.Step.Type, DependsOn: rec.Step.DependsOn})
	ctxJSON, err := step.Context(t, workerID, timeout, shape, proto.Version)
	if err != nil {
		return nil, err
	}
	return &Task{Record: rec, Context: ctxJSON, Timeout: timeout, poller: t}, nil
}

// Run replays the task. Its error is about the replay itself (no such task, a module that
// does not load); the handler's own failure is Result.Err.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	pt, err := Prepare(ctx, cfg.Pool, cfg.RunID, cfg.Step, cfg.Index, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	fl, st, err := findStep(cfg.Flows, pt.Record, cfg.Module != "")
	if err != nil {
		return nil, err
	}
	res := &Result{Task: pt.Record, Module: st.Module, Timeout: pt.Timeout}
	if cfg.Module != "" {
		res.Module = cfg.Module
	}
	mc := st.ModuleConfig()
	mc.Capabilities = step.Capabilities(cfg.Flows, fl, st, nil, cfg.Log)
	if cfg.NoHTTP {
		mc.Capabilities.HTTP = nil
	}
	mod, err := step.LoadAs(ctx, cfg.Engine, st, res.Module, mc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", res.Module, err)
	}
	defer mod.Close(ctx)

	task := sandbox.Task{Input: pt.Record.Input, Context: pt.Context, Timeout: pt.Timeout}
	if st.Deterministic {
		task.Seed, task.FixedClock = step.Seed(&pt.poller), true
	}
	if st.SQL != nil {
		grant, closeDB, err := rolledBackGrant(ctx, cfg.Pool, cfg.Flows, fl, st)
		if err != nil {
			return nil, err
		}
		defer closeDB()
		sess := grant.Begin(time.Now().Add(pt.Timeout))
		defer sess.Close() // never completed: the transaction is rolled back
		task.SQL = sess
	}
	res.Run, res.Err = mod.Run(ctx, task)
	var se *sandbox.Error
	if res.Err != nil && !errors.As(res.Err, &se) {
		return nil, res.Err
	}
	return res, nil
}

// findStep finds the task's step in the flows file.
func findStep(file *flowfile.File, rec store.TaskRecord, moduleGiven bool) (*flowfile.Flow, *flowfile.Step, error) {
	fl := file.Flow(rec.FlowSlug)
	if fl == nil {
		return nil, nil, fmt.Errorf("%s has no flow %q (the task's): give the flows file that serves it with --flows", file.Path, rec.FlowSlug)
	}
	st := fl.Step(rec.Step.Slug)
	if st == nil {
		return nil, nil, fmt.Errorf("flow %q in %s has no step %q (the task's)", rec.FlowSlug, file.Path, rec.Step.Slug)
	}
	if st.Module == "" && !moduleGiven {
		return nil, nil, fmt.Errorf("step %q of flow %q is external in %s: another worker runs it; give its module with --module", rec.Step.Slug, rec.FlowSlug, file.Path)
	}
	return fl, st, nil
}

// rolledBackGrant is the step's sql grant made transactional, on the pgflow database or the
// one its database_env names, logged in as the step's role as the worker would: the replay
// never completes it, so Close rolls it back.
func rolledBackGrant(ctx context.Context, pool *pgxpool.Pool, file *flowfile.File, fl *flowfile.Flow, st *flowfile.Step) (*sqlsession.Grant, func(), error) {
	g := step.Grant(file, fl, st)
	g.Transactional = true
	var err error
	if g.DB, err = step.RolePool(ctx, pool.Config(), g.Where, st.SQL, 1); err != nil {
		return nil, nil, fmt.Errorf("%w: set it here as the worker has it", err)
	}
	return g, g.DB.Close, nil
}
