package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
)

//go:embed assets/templates/*.html
var templateFiles embed.FS

//go:embed assets/static
var staticFiles embed.FS

// assetVersion changes whenever a static file does, so browsers never mix old and new.
var assetVersion = func() string {
	h := sha256.New()
	_ = fs.WalkDir(staticFiles, "assets/static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := staticFiles.ReadFile(path)
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)[:6])
}()

func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFiles, "assets/static")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400") // URLs carry ?v=assetVersion
		files.ServeHTTP(w, r)
	})
}

// pages holds one template set per page: each page file defines "title" and "live" (the
// part of the page live updates replace) on top of the shared layout.
type pages struct {
	byName map[string]*template.Template
}

// newPages parses the templates for a dashboard under basePath: their "path" function puts
// it before every dashboard path they link to ("" stays "", for a link that is not there).
func newPages(basePath string) (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	fm := template.FuncMap{"path": func(p string) string {
		if p == "" {
			return ""
		}
		return basePath + p
	}}
	maps.Copy(fm, funcs)
	base, err := template.New("layout.html").Funcs(fm).ParseFS(templateFiles, "assets/templates/layout.html")
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"runs", "run", "flows", "workers", "search", "stats", "failures"} {
		t, err := base.Clone()
		if err != nil {
			return nil, err
		}
		if _, err := t.ParseFS(templateFiles, "assets/templates/"+name+".html"); err != nil {
			return nil, err
		}
		p.byName[name] = t
	}
	return p, nil
}

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string // the active navigation item
	Live    string // the event stream of this page
	Version string // fingerprint of what the page shows, for the event stream
	Now     time.Time
	Actions bool
	CSRF    string
	Asset   string
	Zone    string
	Search  string // the header's search box's text
	Data    any
	status  int // HTTP status, 200 when 0
}

// render writes a page, or only its live part when the page's script asks for an update.
func (s *Dashboard) render(w http.ResponseWriter, r *http.Request, name string, v view) {
	v.Actions, v.CSRF, v.Asset = s.cfg.Actions, s.guard.csrf, assetVersion
	v.Zone, _ = v.Now.Local().Zone()
	tmpl := "layout"
	if r.Header.Get("X-Live") == "1" {
		tmpl = "fragment"
	}
	var b bytes.Buffer
	if err := s.pages.byName[name].ExecuteTemplate(&b, tmpl, v); err != nil {
		s.log.Error("dashboard: rendering a page failed", "page", name, "error", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if v.status != 0 {
		w.WriteHeader(v.status)
	}
	_, _ = w.Write(b.Bytes())
}

// fail answers a request the page could not serve: a page that says why (the page's
// script, asking for the live part, gets the reason as text). While the database is away
// the page retries by itself and shows the dashboard again once it is back.
func (s *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	status, msg := dbProblem(err)
	if status != http.StatusNotFound {
		s.log.Warn("dashboard: a page failed", "path", r.URL.Path, "status", status, "error", err)
	}
	if r.Header.Get("X-Live") == "1" {
		http.Error(w, msg, status)
		return
	}
	n := notice{Status: status, Title: "Not found", Message: msg, Back: "/runs", BackText: "The runs"}
	switch status {
	case http.StatusServiceUnavailable:
		n.Title, n.Retry, n.Back = "Database unreachable", true, ""
		n.Message += "; this page retries by itself every " + strconv.Itoa(noticeRetrySeconds) + " seconds."
	case http.StatusInternalServerError:
		n.Title = "Query failed"
	}
	writeNotice(w, s.base, n)
}

// dbProblem is the status and the sentence for an error reading the database: 503 while it
// cannot be reached (the connection refused, lost or timed out), 404 for what it does not
// have, 500 for a query it refused.
func dbProblem(err error) (int, string) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, "Not found: this database has no such run, step or task."
	case dberr.Transient(err) || errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "The database is unreachable: " + err.Error()
	}
	return http.StatusInternalServerError, "The database query failed: " + err.Error()
}

var funcs = template.FuncMap{
	"status":    statusClass,
	"short":     shortID,
	"clock":     clock,
	"took":      took,
	"tookUntil": func(start *time.Time, end time.Time) string { return took(start, &end, end) },
	"elapsed":   elapsed,
	"since":     func(t time.Time) int64 { return t.UnixMilli() },
	"unixms":    func(t time.Time) int64 { return t.UnixMilli() },
	"dur":       formatDuration,
	"ago":       func(t, now time.Time) time.Duration { return now.Sub(t) },
	"json":      jsonText,
	"size":      byteSize,
	"int":       func(p *int) int { return *p },
	"count":     func(n int) string { return groupDigits(n) },
	"add":       func(a, b int) int { return a + b },
	"seconds":   func(n int) string { return strconv.Itoa(n) + " s" },
	"percent":   func(a, b int) int { return percent(a, b) },
	"isodate":   func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"zoned":     func(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST") }, // in t's own zone (a schedule's)
	"upper":     strings.ToUpper,
	"join":      strings.Join,
	"split":     strings.Split,
	"orDash":    orDash,
	"hasValue":  func(p *int) bool { return p != nil },
	"deref":     func(t *time.Time) time.Time { return *t },
	"dict":      dict,
	"breakable": breakable,
	"int64":     func(n int64) int { return int(n) },
	"uint64":    func(n uint64) int { return int(n) },
}

// statusClass maps a status to its CSS class; unknown statuses (a newer pgflow's) get a
// neutral one.
func statusClass(s string) string {
	switch s {
	case "created", "queued", "started", "completed", "failed", "skipped", "cancelled", "alive", "dead", "deprecated", "drained", "stopped":
		return "st-" + s
	}
	return "st-other"
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// clock formats a time in the dashboard's time zone; the date only when it is not today.
func clock(t time.Time, now time.Time) string {
	t, now = t.Local(), now.Local()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04:05")
}

// took is how long something ran, or has run so far.
func took(start, end *time.Time, now time.Time) string {
	if start == nil {
		return ""
	}
	if end == nil {
		return formatDuration(now.Sub(*start))
	}
	return formatDuration(end.Sub(*start))
}

// elapsed is took for a start that is always known.
func elapsed(start time.Time, end *time.Time, now time.Time) string { return took(&start, end, now) }

// formatDuration is short and readable; live.js formats the same way.
func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0 ms"
	case d < time.Second:
		return strconv.Itoa(int(d.Milliseconds())) + " ms"
	case d < time.Minute && d%time.Second == 0:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// jsonText is a JSON value for display: indented when whole and small, else its text as
// stored (cut values cannot be re-indented), ending in an ellipsis when cut.
func jsonText(j store.JSON) string {
	if j.Null {
		return "null"
	}
	if j.Cut() {
		return strings.ToValidUTF8(j.Text, "") + " …"
	}
	var b bytes.Buffer
	if len(j.Text) <= 600 && json.Indent(&b, []byte(j.Text), "", "  ") == nil {
		if utf8.Valid(b.Bytes()) {
			return b.String()
		}
	}
	return j.Text
}

// breakable is a path that may wrap after each slash (and nowhere else): escaped, with <wbr>.
func breakable(path string) template.HTML {
	return template.HTML(strings.ReplaceAll(template.HTMLEscapeString(path), "/", "/<wbr>"))
}

// dict builds a map from key, value pairs, to pass several values to a template.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: odd number of arguments")
	}
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

func byteSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
}

func groupDigits(n int) string {
	s := strconv.Itoa(n)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func percent(a, b int) int {
	if b <= 0 {
		return 0
	}
	return a * 100 / b
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// notice is a page that is only a message: a refusal, an error, the database unreachable.
type notice struct {
	Status   int
	Title    string
	Message  string
	Back     string // a link back, "" for none
	BackText string
	Retry    bool // the page reloads itself every few seconds (the database is away)
}

// noticeRetrySeconds is how often a notice page with Retry reloads itself.
const noticeRetrySeconds = 5

// writeNotice writes a notice page of a dashboard under base (its Back is a dashboard path).
func writeNotice(w http.ResponseWriter, base string, n notice) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	if n.Retry {
		h.Set("Retry-After", strconv.Itoa(noticeRetrySeconds))
	}
	w.WriteHeader(n.Status)
	if n.Back != "" {
		n.Back = base + n.Back
	}
	_ = noticePage.Execute(w, struct {
		notice
		Asset, Base string
	}{n, assetVersion, base})
}

// noticePage reloads itself with a meta refresh, which needs no script (and no CSP change).
var noticePage = template.Must(template.New("notice").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">{{if .Retry}}<meta http-equiv="refresh" content="` + strconv.Itoa(noticeRetrySeconds) + `">{{end}}
<title>{{.Title}} · pgflow-wasm</title>
<link rel="stylesheet" href="{{.Base}}/static/app.css?v={{.Asset}}"></head>
<body><main class="notice"><h1>{{.Title}}</h1><p>{{.Message}}</p>{{if .Back}}<p><a href="{{.Back}}">{{.BackText}}</a></p>{{end}}</main></body></html>`))

var unauthorizedPage = template.Must(template.New("401").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Token needed · pgflow-wasm</title>
<link rel="stylesheet" href="{{.Base}}/static/app.css?v={{.Asset}}"></head>
<body><main class="notice">
<h1>Token needed</h1>
<p>Refused: {{.Why}}.</p>
<p>Open the dashboard's address once with <code>?token=</code> followed by the token given to
<code>pgflow-wasm ui</code> (<code>--ui-token</code> or <code>--ui-token-file</code>): the browser then keeps a
session cookie. Scripts can send <code>Authorization: Bearer &lt;token&gt;</code> instead.</p>
</main></body></html>`))
