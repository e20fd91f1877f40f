package dashboard_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/dashtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/tracing"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

var traceLinkRE = regexp.MustCompile(`<a class="trace-link" href="([^"]+)"`)

// TestRunPageLinksToTheRunsRootSpanTrace serves a traced run and opens its page on a
// dashboard given a trace URL template: the link carries the trace id of the spans the
// worker sent, the run's root span included, and the run id where the template asks.
// Without a template the page has no link.
func TestRunPageLinksToTheRunsRootSpanTrace(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), exp, false)
	if err != nil {
		t.Fatal(err)
	}
	root := workertest.RepoRoot(t)
	f := workertest.FlowsFile(t, strings.ReplaceAll(echoFlows, "{{root}}", root), nil)
	workertest.StartWorker(t, db.Pool, f, worker.Config{Hooks: tr.Hooks()})
	id := workertest.StartRun(t, db.Pool, "echo", `{"x": 1}`)
	if r := workertest.WaitRun(t, db.Pool, id, 30*time.Second); r.Status != "completed" {
		t.Fatalf("run %s: %s", id, r.Status)
	}
	var rootTrace string
	for deadline := time.Now().Add(10 * time.Second); rootTrace == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range exp.GetSpans() {
			if s.Name == "run echo" {
				rootTrace = s.SpanContext.TraceID().String()
			}
		}
	}
	if rootTrace == "" {
		t.Fatal("the run's root span was not sent")
	}

	page := func(cfg dashboard.Config) string {
		t.Helper()
		cfg.Pool = db.Pool
		srv := dashtest.Listen(t, "127.0.0.1:0", cfg)
		resp, err := http.Get(srv.URL() + "runs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("run page: %s", resp.Status)
		}
		return string(b)
	}
	body := page(dashboard.Config{TraceURL: "https://tempo.example/explore?trace={trace_id}&run={run_id}"})
	m := traceLinkRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no trace link on the run page:\n%s", body)
	}
	if got, want := html.UnescapeString(m[1]), "https://tempo.example/explore?trace="+rootTrace+"&run="+id; got != want {
		t.Errorf("trace link %s, want %s", got, want)
	}
	if body := page(dashboard.Config{}); traceLinkRE.MatchString(body) {
		t.Error("a trace link without a trace URL")
	}
}

// A template that cannot link a run to its trace is refused when the dashboard starts.
func TestTraceURLWithoutAPlaceholderOrHTTPIsRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for tmpl, want := range map[string]string{
		"https://tempo.example/trace":            "has neither {trace_id} nor {run_id}",
		"javascript:alert({trace_id})":           "is not an http(s) URL",
		"tempo.example/trace/{run_id}":           "is not an http(s) URL",
		"https://tempo.example/trace/{trace_id}": "",
	} {
		d, err := dashboard.New(context.Background(), dashboard.Config{Pool: db.Pool, TraceURL: tmpl})
		if err == nil {
			d.Close()
		}
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", tmpl, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", tmpl, err, want)
		}
	}
}
