package dashboard

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/dag"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/live"
	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// countsWindow is the period the flows page counts runs over.
const countsWindow = time.Hour

// moduleView is a step's module as the flows file names it and the sandbox loaded it.
type moduleView struct {
	Path          string // relative to the flows file when inside its folder
	Info          sandbox.Info
	Loaded        bool // Info comes from the sandbox (else only the path is known)
	MemoryLimit   uint64
	ReuseInstance bool
}

type flowStepView struct {
	store.FlowStep
	Module   *moduleView // nil when the flows file does not declare this step, or it is External
	External bool        // another worker serves it (flows.yaml `external: true`)
}

type flowView struct {
	store.Flow
	Steps    []flowStepView
	Graph    dag.Graph
	InFile   bool
	Total    int
	Schedule *schedule.Status // nil when the flows file gives the flow no schedule
}

// startForm is the start-a-run form of one flow, filled in again when it was refused.
type startForm struct {
	Flow, Input, Error string
}

type flowsView struct {
	Form      *startForm
	Flows     []flowView
	FlowsFile string   // "" when the dashboard was given none
	NotInDB   []string // flows of the file not compiled into the database
	Window    string
	Statuses  []string
}

func (s *Dashboard) flowsPage(w http.ResponseWriter, r *http.Request) { s.renderFlows(w, r, nil) }

// renderFlows writes the flows page; form, when not nil, is a refused start to show again
// (with status 400).
func (s *Dashboard) renderFlows(w http.ResponseWriter, r *http.Request, form *startForm) {
	flows, err := s.store.Flows(r.Context(), countsWindow)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now, err := s.store.Now(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := flowsView{Window: "last hour", Statuses: store.RunStatuses, Form: form}
	var file *flowfile.File
	if s.cfg.Flows != nil {
		file = s.cfg.Flows()
	}
	if file != nil {
		v.FlowsFile = file.Path
	}
	for _, f := range flows {
		fv := flowView{Flow: f}
		var def *flowfile.Flow
		if file != nil {
			def = file.Flow(f.Slug)
		}
		fv.InFile = def != nil
		// The schedule as `flow list` shows it: the next tick, and the last that started a run.
		if st, ok, err := schedule.Describe(r.Context(), s.store.Pool(), def, now); err != nil {
			s.fail(w, r, err)
			return
		} else if ok {
			fv.Schedule = &st
		}
		var nodes []dag.Node
		for _, st := range f.Steps {
			sv := flowStepView{FlowStep: st}
			if def != nil {
				if sd := def.Step(st.Slug); sd != nil && sd.External {
					sv.External = true
				} else if sd != nil {
					sv.Module = s.moduleOf(file, f.Slug, sd)
				}
			}
			fv.Steps = append(fv.Steps, sv)
			label := st.Type
			if sv.Module != nil && sv.Module.Loaded && sv.Module.Info.ABIVersion != 0 {
				label += " · ABI v" + strconv.Itoa(int(sv.Module.Info.ABIVersion))
			}
			nodes = append(nodes, dag.Node{Slug: st.Slug, DependsOn: st.DependsOn, Status: "def", Label: label, External: sv.External})
		}
		fv.Graph = dag.Layout(nodes)
		for _, n := range f.Counts {
			fv.Total += n
		}
		v.Flows = append(v.Flows, fv)
	}
	if file != nil {
		for _, fl := range file.Flows {
			if !slices.ContainsFunc(flows, func(f store.Flow) bool { return f.Slug == fl.Slug }) {
				v.NotInDB = append(v.NotInDB, fl.Slug)
			}
		}
	}
	pv := view{Title: "Flows", Nav: "flows", Live: "/events/flows", Version: flowsFingerprint(flows), Now: now, Data: v}
	if form != nil {
		// The refusal stays on screen: no live updates would replace it.
		pv.status, pv.Live = http.StatusBadRequest, ""
	}
	s.render(w, r, "flows", pv)
}

func (s *Dashboard) moduleOf(file *flowfile.File, flow string, sd *flowfile.Step) *moduleView {
	m := &moduleView{Path: sd.Module, MemoryLimit: sd.MemoryLimit, ReuseInstance: sd.ReuseInstance}
	if rel, err := filepath.Rel(filepath.Dir(absPath(file.Path)), sd.Module); err == nil && filepath.IsLocal(rel) {
		m.Path = rel
	}
	if s.cfg.Modules != nil {
		m.Info, m.Loaded = s.cfg.Modules(flow, sd.Slug)
	}
	return m
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// flowsFingerprint covers the flows, their steps and the run counts.
func flowsFingerprint(flows []store.Flow) string {
	var parts []string
	for _, f := range flows {
		parts = append(parts, f.Slug, strconv.Itoa(len(f.Steps)))
		statuses := make([]string, 0, len(f.Counts))
		for st := range f.Counts {
			statuses = append(statuses, st)
		}
		sort.Strings(statuses)
		for _, st := range statuses {
			parts = append(parts, st+"="+strconv.Itoa(f.Counts[st]))
		}
	}
	return store.Digest(parts...)
}

func (s *Dashboard) flowsProbe() live.Probe {
	return func(ctx context.Context) (live.State, error) {
		flows, err := s.store.Flows(ctx, countsWindow)
		if err != nil {
			return live.State{}, err
		}
		// Counts change with every run: new runs are announced on the queues' channels,
		// their ends only on each run's own; the settled poll catches those.
		st := live.State{Fingerprint: flowsFingerprint(flows)}
		for _, f := range flows {
			st.Channels = append(st.Channels, schema.InsertChannel(f.Slug))
		}
		return st, nil
	}
}

// workersView is the workers page.
type workersView struct {
	// Processes are pgflow-wasm's worker processes, each with the flows it serves; Workers
	// are the pgflow.workers rows (one per flow a process serves, new ones at each reload).
	Processes  []store.Process
	Workers    []store.Worker
	StaleAfter time.Duration
	Older      string
	Alive      int
	Stopped    bool // the database has workers.stopped_at (pgflow 0.10+)
}

func (s *Dashboard) workersPage(w http.ResponseWriter, r *http.Request) {
	page, err := s.store.Workers(r.Context(), r.URL.Query().Get("older"), 100)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	procs, err := s.store.Processes(r.Context(), maxProcesses)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := workersView{Processes: procs, Workers: page.Workers, StaleAfter: s.store.StaleAfter(), Stopped: s.store.Protocol().StoppedAt}
	if page.Older != "" {
		v.Older = "/workers?older=" + page.Older
	}
	for _, wk := range page.Workers {
		if wk.Alive {
			v.Alive++
		}
	}
	s.render(w, r, "workers", view{Title: "Workers", Nav: "workers", Live: "/events/workers?" + r.URL.RawQuery,
		Version: s.workersFingerprint(page, procs), Now: page.Now, Data: v})
}

// maxProcesses caps the worker processes the workers page lists (alive ones first).
const maxProcesses = 100

// workersFingerprint changes when a worker appears, dies, is deprecated or stopped, or its
// number of running tasks changes (heartbeat ages tick in the browser).
func (s *Dashboard) workersFingerprint(p store.WorkerPage, procs []store.Process) string {
	var parts []string
	for _, pr := range procs {
		parts = append(parts, pr.ID, strconv.FormatBool(pr.Alive), strconv.FormatBool(pr.DrainedAt != nil), strings.Join(pr.Flows, ","),
			strconv.Itoa(pr.Running))
	}
	for _, w := range p.Workers {
		parts = append(parts, w.ID, strconv.FormatBool(w.Alive),
			strconv.FormatBool(w.DeprecatedAt != nil), strconv.FormatBool(w.StoppedAt != nil), strconv.Itoa(w.Running))
	}
	return store.Digest(parts...)
}

func (s *Dashboard) workersProbe(cursor string) live.Probe {
	return func(ctx context.Context) (live.State, error) {
		page, err := s.store.Workers(ctx, cursor, 100)
		if err != nil {
			return live.State{}, err
		}
		procs, err := s.store.Processes(ctx, maxProcesses)
		if err != nil {
			return live.State{}, err
		}
		// Alive workers beat every few seconds; a worker goes stale over tens of seconds.
		return live.State{Fingerprint: s.workersFingerprint(page, procs)}, nil
	}
}
