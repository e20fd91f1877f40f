package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/dag"
	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/live"
	"github.com/pgflow-wasm/pgflow-wasm/internal/runctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// runsView is the runs page.
type runsView struct {
	Flow, Status string
	Flows        []string
	Statuses     []string
	Runs         []pgflowtype.Run
	Older, Newer string // links to the neighbouring pages, "" when there is none
	Error        string // a bad filter or page position, shown above the list
	Now          time.Time
}

// runFilter reads the runs page's query: flow, status, and a page position (before or after).
func runFilter(q url.Values) (store.RunFilter, string) {
	f := store.RunFilter{Flow: q.Get("flow"), Status: q.Get("status")}
	if f.Status != "" && !slices.Contains(store.RunStatuses, f.Status) {
		return store.RunFilter{Flow: f.Flow}, "unknown status " + strconv.Quote(f.Status) + ": showing every status"
	}
	for key, dst := range map[string]**store.Cursor{"before": &f.Before, "after": &f.After} {
		if v := q.Get(key); v != "" {
			c, err := store.ParseCursor(v)
			if err != nil {
				return store.RunFilter{Flow: f.Flow, Status: f.Status}, err.Error() + ": showing the newest runs"
			}
			*dst = &c
		}
	}
	return f, ""
}

func runsLink(f store.RunFilter, key string, c *store.Cursor) string {
	if c == nil {
		return ""
	}
	q := url.Values{}
	if f.Flow != "" {
		q.Set("flow", f.Flow)
	}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	q.Set(key, c.String())
	return "/runs?" + q.Encode()
}

// runsFingerprint is what the runs page's live stream compares: the runs shown and their
// states, and whether there is a newer page.
func runsFingerprint(p store.RunPage) string {
	parts := []string{strconv.FormatBool(p.Newer != nil), strconv.FormatBool(p.Older != nil)}
	for _, r := range p.Runs {
		parts = append(parts, r.ID+"="+r.Status)
	}
	return store.Digest(parts...)
}

func (s *Dashboard) runsPage(w http.ResponseWriter, r *http.Request) {
	f, problem := runFilter(r.URL.Query())
	page, err := s.store.List(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	flows, err := s.store.FlowSlugs(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := runsView{Flow: f.Flow, Status: f.Status, Flows: flows, Statuses: store.RunStatuses, Runs: page.Runs,
		Older: runsLink(f, "before", page.Older), Newer: runsLink(f, "after", page.Newer), Error: problem, Now: page.Now}
	s.render(w, r, "runs", view{Title: "Runs", Nav: "runs", Live: "/events/runs?" + r.URL.RawQuery,
		Version: runsFingerprint(page), Now: page.Now, Data: v})
}

// runsProbe re-reads a runs page for its live stream. It listens to the channels of the
// runs on it that are still going, and to the queue-insert channels of its flows, where a
// new run's first tasks are announced when the workers use --signal notify; otherwise new
// runs show up at the next poll.
func (s *Dashboard) runsProbe(f store.RunFilter) live.Probe {
	return func(ctx context.Context) (live.State, error) {
		page, err := s.store.List(ctx, f)
		if err != nil {
			return live.State{}, err
		}
		st := live.State{Fingerprint: runsFingerprint(page)}
		for _, r := range page.Runs {
			if r.Status == "started" {
				st.Channels = append(st.Channels, store.Topic(r.ID))
				st.Active = true
			}
		}
		if f.Before == nil && f.After == nil {
			flows, err := s.store.FlowSlugs(ctx)
			if err != nil {
				return live.State{}, err
			}
			for _, fl := range flows {
				if f.Flow == "" || f.Flow == fl {
					st.Channels = append(st.Channels, schema.InsertChannel(fl))
				}
			}
		}
		return st, nil
	}
}

// stepView is one step on the run page with a page of its tasks.
type stepView struct {
	store.Step
	Tasks      []store.Task
	First      int    // index of the first task listed (with FailedOnly: its place among the failed)
	Total      int    // tasks the step has (or will have, once known)
	Done       int    // completed tasks
	PrevPage   string // links to the neighbouring pages of tasks
	NextPage   string
	TotalKnown bool
	Range      string // which tasks the page lists, e.g. "tasks 21–40 of 200"

	// A map step's failed elements, named in its header so that none is lost among pages.
	Failed     []failedElement // the first maxFailedNamed, in index order
	FailedMore int             // how many more failed
	FailedOnly bool            // the list shows failed tasks only
	FailedLink string          // the failed-only list
	AllLink    string          // every element, from the first
	Highlight  int             // the element jumped to, -1 for none
}

// failedElement is a failed task's index and a link to the page that lists it.
type failedElement struct {
	Index int
	Href  string
}

// maxFailedNamed caps the failed elements a step header names; the rest are counted.
const maxFailedNamed = 10

// runView is the run page.
type runView struct {
	Run       *store.RunPreview
	Steps     []stepView
	StepsDone int
	Graph     dag.Graph
	Error     string // the first failed step's error
	TraceURL  string // the run's trace in a tracing UI (Config.TraceURL); "" when none
	// Links are the run's rerun links: the run it repeats and the runs that repeat it.
	Links runctl.Links
}

func (s *Dashboard) runPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	// The fingerprint is read before what the page shows: a change between the reads (the
	// page's queries are no snapshot) then makes the next probe's differ, and the page is
	// read again, instead of a half-old page carrying the new fingerprint and staying so.
	fp, _, err := s.store.RunState(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.store.Preview(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	steps, err := s.store.Steps(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	pagedStep := q.Get("step")
	from, err := strconv.Atoi(q.Get("from"))
	if err != nil || from < 0 {
		from = -1
	}
	failedOnly := q.Get("only") == "failed"
	per := s.cfg.TasksPerPage
	v := runView{Run: run, TraceURL: traceLink(s.cfg.TraceURL, run.ID)}
	if v.Links, err = runctl.RerunLinks(ctx, s.store.Pool(), run.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	def := s.flowDef(run.Flow)
	var nodes []dag.Node
	for _, st := range steps {
		sv := stepView{Step: st, Total: st.TaskCount(), Done: st.Counts["completed"], Highlight: -1}
		if st.InitialTasks != nil {
			sv.Total = max(sv.Total, *st.InitialTasks)
		}
		sv.TotalKnown = st.InitialTasks != nil || st.Type != "map" || sv.Total > 0
		failed := st.Counts["failed"]
		mine := st.Slug == pagedStep
		sv.FailedOnly = mine && failedOnly && failed > 0
		if st.Type == "map" && failed > 0 {
			indices, err := s.store.IndicesInStatus(ctx, id, st.Slug, "failed", maxFailedNamed)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			for _, i := range indices {
				sv.Failed = append(sv.Failed, failedElement{i, elementLink(id, st.Slug, i)})
			}
			sv.FailedMore = failed - len(indices)
			sv.FailedLink = stepLink(id, st.Slug, url.Values{"only": {"failed"}})
			sv.AllLink = stepLink(id, st.Slug, nil)
		}
		if sv.FailedOnly {
			if mine && from > 0 && from < failed {
				sv.First = from - from%per
			}
			if sv.Tasks, err = s.store.TasksInStatus(ctx, id, st, "failed", sv.First, per); err != nil {
				s.fail(w, r, err)
				return
			}
			only := url.Values{"only": {"failed"}}
			if sv.First > 0 {
				sv.PrevPage = stepPageLink(id, st.Slug, max(sv.First-per, 0), only)
			}
			if sv.First+per < failed {
				sv.NextPage = stepPageLink(id, st.Slug, sv.First+per, only)
			}
			sv.Range = fmt.Sprintf("failed elements %d–%d of %s", sv.First+1, sv.First+len(sv.Tasks), groupDigits(failed))
		} else {
			if mine && from >= 0 && from < sv.Total {
				sv.First = from - from%per
				sv.Highlight = from
			}
			if sv.Tasks, err = s.store.Tasks(ctx, id, st, sv.First, per); err != nil {
				s.fail(w, r, err)
				return
			}
			if sv.First > 0 {
				sv.PrevPage = stepPageLink(id, st.Slug, max(sv.First-per, 0), nil)
			}
			if sv.First+per < st.TaskCount() {
				sv.NextPage = stepPageLink(id, st.Slug, sv.First+per, nil)
			}
			sv.Range = fmt.Sprintf("tasks %d–%d of %s", sv.First+1, sv.First+len(sv.Tasks), groupDigits(st.TaskCount()))
		}
		if st.Error != "" && v.Error == "" {
			v.Error = st.Error
		}
		if st.Status == "completed" || st.Status == "skipped" {
			v.StepsDone++
		}
		v.Steps = append(v.Steps, sv)
		nodes = append(nodes, dag.Node{Slug: st.Slug, DependsOn: st.DependsOn, Status: st.Status,
			Label: stepLabel(sv, run.EndedAt() != nil), Href: "#step-" + st.Slug, External: external(def, st.Slug)})
	}
	v.Graph = dag.Layout(nodes)
	s.render(w, r, "run", view{Title: "Run " + shortID(run.ID), Nav: "runs", Live: "/events/runs/" + run.ID,
		Version: fp, Now: run.Now, Data: v})
}

// flowDef is a flow as the flows file the worker serves declares it, nil when unknown.
func (s *Dashboard) flowDef(flow string) *flowfile.Flow {
	if s.cfg.Flows == nil {
		return nil
	}
	if file := s.cfg.Flows(); file != nil {
		return file.Flow(flow)
	}
	return nil
}

// external says whether the flows file has another worker serve a step (`external: true`):
// the database does not know which worker serves what.
func external(def *flowfile.Flow, step string) bool {
	if def == nil {
		return false
	}
	sd := def.Step(step)
	return sd != nil && sd.External
}

// stepLink is the run page showing one step's tasks as the query says, scrolled to the step.
func stepLink(run, step string, q url.Values) string {
	if q == nil {
		q = url.Values{}
	}
	q.Set("step", step)
	return "/runs/" + run + "?" + q.Encode() + "#step-" + step
}

// stepPageLink is a page of a step's tasks starting at from.
func stepPageLink(run, step string, from int, q url.Values) string {
	if q == nil {
		q = url.Values{}
	}
	q.Set("from", strconv.Itoa(from))
	return stepLink(run, step, q)
}

// elementLink is the page listing a step's element, scrolled to the element's row.
func elementLink(run, step string, index int) string {
	q := url.Values{"step": {step}, "from": {strconv.Itoa(index)}}
	return "/runs/" + run + "?" + q.Encode() + "#task-" + step + "-" + strconv.Itoa(index)
}

// stepLabel is the second line of a step's node in the graph.
func stepLabel(sv stepView, runEnded bool) string {
	switch {
	case runEnded && (sv.Status == "started" || sv.Status == "created"):
		return sv.Status + " · left unfinished"
	case sv.Type == "map" && sv.TotalKnown && sv.Counts["failed"] > 0:
		return "map · " + strconv.Itoa(sv.Done) + "/" + strconv.Itoa(sv.Total) + " · " + strconv.Itoa(sv.Counts["failed"]) + " failed"
	case sv.Type == "map" && sv.TotalKnown:
		return "map · " + strconv.Itoa(sv.Done) + "/" + strconv.Itoa(sv.Total) + " done"
	case sv.Type == "map":
		return "map · " + sv.Status
	}
	if k := sv.Tasks; len(k) == 1 && k[0].Attempts > 1 {
		return sv.Status + " · attempt " + strconv.Itoa(k[0].Attempts)
	}
	return sv.Status
}

func (s *Dashboard) runProbe(id string) live.Probe {
	return func(ctx context.Context) (live.State, error) {
		fp, active, err := s.store.RunState(ctx, id)
		if err != nil {
			return live.State{}, err
		}
		return live.State{Fingerprint: fp, Active: active, Channels: []string{store.Topic(id)}}, nil
	}
}

// runJSON serves a run's whole input or output.
func (s *Dashboard) runJSON(w http.ResponseWriter, r *http.Request) {
	v, err := s.store.RunValue(r.Context(), r.PathValue("id"), r.PathValue("field"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, v)
}

// taskJSON serves a task's whole input or output.
func (s *Dashboard) taskJSON(w http.ResponseWriter, r *http.Request) {
	index, err := strconv.Atoi(r.PathValue("index"))
	if err != nil || index < 0 {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	v, err := s.store.TaskValue(r.Context(), r.PathValue("id"), r.PathValue("step"), index, r.PathValue("field"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, v)
}

// writeJSON sends a stored JSON value as it is: application/json (with nosniff, never
// rendered as HTML whatever it contains).
func writeJSON(w http.ResponseWriter, v []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Disposition", "inline")
	_, _ = w.Write(v)
}
