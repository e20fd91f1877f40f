package dashboard

import (
	"net/http"
	"strconv"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
)

// failureWindows are the periods the failures page offers, by their query value.
var failureWindows = []struct {
	Name  string
	Label string
	Span  time.Duration
}{{"hour", "last hour", time.Hour}, {"day", "last day", 24 * time.Hour}, {"week", "last 7 days", 7 * 24 * time.Hour}}

// maxFailureGroups caps the groups the failures page lists.
const maxFailureGroups = 200

type failuresView struct {
	Window  string // failureWindows' Name
	Windows []string
	Label   string
	Bar     time.Duration // what one bar of a sparkline spans
	Groups  []failureGroupView
	Failed  int // tasks that failed in the window
	Shaped  int // the newest of them, grouped (fewer than Failed in a burst)
}

type failureGroupView struct {
	store.FailureGroup
	Href  string        // the latest failed task's row on its run page
	Spark []sparkBar    // the sparkline: failures over the window, oldest left
	Span  time.Duration // one bar's span
}

// sparkBar is one bar of a sparkline, in its SVG's units.
type sparkBar struct {
	X, Y, H, N int
}

// sparkHeight and sparkStep size the sparkline's SVG: FailureBuckets bars of sparkStep units.
const sparkHeight, sparkStep = 20, 4

// sparkline scales counts to bars of at most sparkHeight; an empty span has no bar, a span
// with any failure at least one unit.
func sparkline(counts []int) []sparkBar {
	top := 0
	for _, n := range counts {
		top = max(top, n)
	}
	var out []sparkBar
	for i, n := range counts {
		if n == 0 {
			continue
		}
		h := max(1, n*sparkHeight/top)
		out = append(out, sparkBar{X: i * sparkStep, Y: sparkHeight - h, H: h, N: n})
	}
	return out
}

// failuresPage groups recently failed tasks by the shape of their error (ids, numbers,
// quoted values and times taken out): what breaks, since when, how often, where, and the
// latest run it broke.
func (s *Dashboard) failuresPage(w http.ResponseWriter, r *http.Request) {
	v := failuresView{Window: "day", Label: "last day"} // unless the query names another
	span := 24 * time.Hour
	for _, fw := range failureWindows {
		v.Windows = append(v.Windows, fw.Name)
		if fw.Name == r.URL.Query().Get("window") {
			v.Window, v.Label, span = fw.Name, fw.Label, fw.Span
		}
	}
	v.Bar = span / store.FailureBuckets
	rep, err := s.store.Failures(r.Context(), span, maxFailureGroups, s.cfg.MaxShapedFailures)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.Failed, v.Shaped = rep.Failed, rep.Shaped
	var parts []string
	for _, g := range rep.Groups {
		v.Groups = append(v.Groups, failureGroupView{FailureGroup: g, Href: elementLink(g.LastRun, g.LastStep, g.LastIndex),
			Spark: sparkline(g.Buckets)})
		parts = append(parts, g.Shape, strconv.Itoa(g.Tasks), g.LastRun)
	}
	// No live stream: the page is a report, read again on a reload.
	s.render(w, r, "failures", view{Title: "Failures", Nav: "failures", Version: store.Digest(parts...), Now: rep.Now, Data: v})
}
