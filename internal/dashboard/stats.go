package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/live"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// statsView is the stats page: per flow, its runs over the last hour and day, and its queues.
type statsView struct {
	Flows []flowStatsView
}

type flowStatsView struct {
	Flow    string
	Windows []windowView
	Queues  []store.Queue
}

// windowView is one flow's runs over one window, with its charts drawn.
type windowView struct {
	store.WindowStats
	Started, Completed, Failed, Duration template.HTML
}

func (s *Dashboard) statsPage(w http.ResponseWriter, r *http.Request) {
	v, fp, now, err := s.readStats(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "stats", view{Title: "Stats", Nav: "stats", Live: "/events/stats", Version: fp, Now: now, Data: v})
}

// readStats reads the stats page and its fingerprint: the totals and the queues' depths.
func (s *Dashboard) readStats(ctx context.Context) (statsView, string, time.Time, error) {
	var v statsView
	flows, err := s.store.FlowSlugs(ctx)
	if err != nil {
		return v, "", time.Time{}, err
	}
	stats, now, err := s.store.FlowStats(ctx)
	if err != nil {
		return v, "", now, err
	}
	queues, err := s.store.Queues(ctx)
	if err != nil {
		return v, "", now, err
	}
	var parts []string
	for _, f := range flows {
		fv := flowStatsView{Flow: f}
		ws, ok := stats[f]
		if !ok {
			ws = store.EmptyStats(now)
		}
		for _, w := range ws {
			fv.Windows = append(fv.Windows, drawWindow(w))
			parts = append(parts, f, w.Window.Name, fmt.Sprint(w.Total))
		}
		for _, q := range queues {
			if q.Flow == f {
				fv.Queues = append(fv.Queues, q)
				parts = append(parts, q.Name, strconv.Itoa(q.Visible), strconv.Itoa(q.Total))
			}
		}
		v.Flows = append(v.Flows, fv)
	}
	return v, store.Digest(parts...), now, nil
}

func (s *Dashboard) statsProbe() live.Probe {
	return func(ctx context.Context) (live.State, error) {
		_, fp, _, err := s.readStats(ctx)
		if err != nil {
			return live.State{}, err
		}
		// New runs are announced on the queues' channels; runs ending and time passing are
		// caught by the settled poll.
		st := live.State{Fingerprint: fp}
		flows, err := s.store.FlowSlugs(ctx)
		if err != nil {
			return live.State{}, err
		}
		for _, f := range flows {
			st.Channels = append(st.Channels, schema.InsertChannel(f))
		}
		return st, nil
	}
}

func (s *Dashboard) statsEvents(w http.ResponseWriter, r *http.Request) {
	s.stream(w, r, "stats", s.statsProbe())
}

// drawWindow draws a window's four charts, one bar per bucket.
func drawWindow(w store.WindowStats) windowView {
	bucket := w.Window.Span / time.Duration(w.Window.Buckets)
	label := func(b store.RunStats) string {
		return b.Start.Local().Format("15:04") + "–" + b.Start.Add(bucket).Local().Format("15:04")
	}
	counts := func(name string, get func(store.RunStats) int) template.HTML {
		bars := make([]bar, len(w.Buckets))
		for i, b := range w.Buckets {
			n := get(b)
			bars[i] = bar{Value: float64(n), Data: strconv.Itoa(n), Title: fmt.Sprintf("%s: %d %s", label(b), n, name)}
		}
		return chartSVG(name, bars, nil)
	}
	p95 := make([]bar, len(w.Buckets))
	p50 := make([]bar, len(w.Buckets))
	for i, b := range w.Buckets {
		title := fmt.Sprintf("%s: p50 %s, p95 %s", label(b), formatDuration(b.P50), formatDuration(b.P95))
		if b.Completed == 0 {
			title = label(b) + ": no run completed"
		}
		p95[i] = bar{Value: b.P95.Seconds(), Data: strconv.FormatInt(b.P95.Milliseconds(), 10), Title: title}
		p50[i] = bar{Value: b.P50.Seconds(), Data: strconv.FormatInt(b.P50.Milliseconds(), 10), Title: title}
	}
	return windowView{WindowStats: w,
		Started:   counts("started", func(b store.RunStats) int { return b.Started }),
		Completed: counts("completed", func(b store.RunStats) int { return b.Completed }),
		Failed:    counts("failed", func(b store.RunStats) int { return b.Failed }),
		Duration:  chartSVG("duration", p95, p50),
	}
}

// bar is one bucket of a chart: its height's value, the number it stands for (data-value,
// for tests and tools) and its tooltip.
type bar struct {
	Value float64
	Data  string
	Title string
}

// Chart sizes, in SVG user units: small enough for four in a row.
const (
	chartWidth  = 180
	chartHeight = 40
	chartGap    = 2
)

// chartSVG draws bars scaled to the largest, with front (p50 over p95) drawn over them
// narrower, as inline SVG: no script and no style attribute (the page's CSP allows neither),
// classes only.
func chartSVG(name string, bars, front []bar) template.HTML {
	if len(bars) == 0 {
		return ""
	}
	top := 0.0
	for _, b := range append(append([]bar{}, bars...), front...) {
		top = max(top, b.Value)
	}
	width := float64(chartWidth-chartGap*(len(bars)-1)) / float64(len(bars))
	height := func(v float64) float64 {
		if top == 0 {
			return 0
		}
		return v / top * (chartHeight - 1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart chart-%s" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s per bucket">`,
		name, chartWidth, chartHeight, chartWidth, chartHeight, name)
	fmt.Fprintf(&b, `<line class="axis" x1="0" y1="%d" x2="%d" y2="%d"/>`, chartHeight-1, chartWidth, chartHeight-1)
	draw := func(class string, list []bar, inset float64) {
		for i, v := range list {
			x := float64(i)*(width+chartGap) + inset
			h := height(v.Value)
			fmt.Fprintf(&b, `<rect class="%s" data-value="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
				class, template.HTMLEscapeString(v.Data), x, chartHeight-1-h, width-2*inset, h, template.HTMLEscapeString(v.Title))
		}
	}
	draw("bar", bars, 0)
	if front != nil {
		draw("bar bar-front", front, width/4)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and escaped text only
}
