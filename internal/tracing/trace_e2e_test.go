package tracing_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	pgflowwasm "github.com/pgflow-wasm/pgflow-wasm"
	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/tracing"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// otlpReceiver is an OTLP/HTTP trace endpoint: it decodes each protobuf export request.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	res   []*commonpb.KeyValue
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		o.res = rs.Resource.GetAttributes()
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		default:
			m[kv.Key] = kv.Value.String()
		}
	}
	return m
}

// TestOneRunIsOneTrace serves a flow with a map step and an HTTP-calling step, traced
// through OTLP/HTTP (configured by OTEL_* variables only) to a receiver in the test: one
// run gives one trace, a root span for the run spanning pgflow's start and end, a child span
// per task with its attributes, a child span per HTTP request,
// traceparent on those requests, and trace_id on the task log lines.
func TestOneRunIsOneTrace(t *testing.T) {
	receiver := &otlpReceiver{}
	collector := httptest.NewServer(receiver)
	defer collector.Close()
	var seenMu sync.Mutex
	var traceparents []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenMu.Lock()
		traceparents = append(traceparents, r.Header.Get("Traceparent"))
		seenMu.Unlock()
		_, _ = io.WriteString(w, "hello, trace")
	}))
	defer api.Close()

	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "traced-worker")
	ctx := context.Background()
	tracer, err := tracing.FromEnv(ctx)
	if err != nil || tracer == nil {
		t.Fatalf("FromEnv: %v, %v", tracer, err)
	}

	flows, err := flowfile.Parse("traced.yaml", workertest.RepoRoot(t), []byte(`
flows:
  - slug: traced
    steps:
      - {slug: items, module: modules/testdata/echo.wasm}
      - {slug: each, type: map, depends_on: [items], module: modules/testdata/echo_map.wasm}
      - slug: fetch
        depends_on: [each]
        module: modules/testdata/http_call.wasm
        http: {allow: ["`+strings.TrimPrefix(api.URL, "http://")+`"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs workertest.SyncBuffer
	logger := slog.New(tracing.LogHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	db := pgtest.NewDB(t)
	client, err := pgflowwasm.NewClient(db.Pool, pgflowwasm.Config{Flows: flows, Signal: pgflowtype.SignalNotify,
		Logger: logger, Hooks: tracer.Hooks()})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	runID, err := client.StartRun(ctx, "traced", map[string]any{"value": []int{1, 2, 3}, "url": api.URL + "/hello", "times": 2})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := client.WaitRun(wctx, runID)
	if err != nil || run.Status != "completed" {
		t.Fatalf("run: %+v, %v", run, err)
	}
	if err := client.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tracer.Shutdown(ctx); err != nil { // sends what the batcher holds
		t.Fatal(err)
	}

	receiver.mu.Lock()
	spans := receiver.spans
	resource := attrs(receiver.res)
	receiver.mu.Unlock()
	if resource["service.name"] != "traced-worker" {
		t.Errorf("service.name %v, want OTEL_SERVICE_NAME's", resource["service.name"])
	}
	wantTrace := tracing.TraceID(runID)
	runSpan := tracing.RunSpanID(runID)
	tasks := map[string][]*tracepb.Span{}
	var httpSpans, roots []*tracepb.Span
	for _, s := range spans {
		if got := hex.EncodeToString(s.TraceId); got != wantTrace.String() {
			t.Errorf("span %q in trace %s, want the run's %s", s.Name, got, wantTrace)
		}
		switch s.Kind {
		case tracepb.Span_SPAN_KIND_CONSUMER:
			a := attrs(s.Attributes)
			tasks[a[tracing.AttrStep].(string)] = append(tasks[a[tracing.AttrStep].(string)], s)
		case tracepb.Span_SPAN_KIND_CLIENT:
			httpSpans = append(httpSpans, s)
		case tracepb.Span_SPAN_KIND_INTERNAL:
			roots = append(roots, s)
		default:
			t.Errorf("unexpected span %q of kind %v", s.Name, s.Kind)
		}
	}
	if len(tasks["items"]) != 1 || len(tasks["each"]) != 3 || len(tasks["fetch"]) != 1 || len(tasks) != 3 {
		t.Fatalf("task spans by step: items %d, each %d, fetch %d (%d steps), want 1, 3, 1",
			len(tasks["items"]), len(tasks["each"]), len(tasks["fetch"]), len(tasks))
	}
	// One root span for the run, with its ids from the run id and pgflow's start and end:
	// every task span is its child and falls within it.
	if len(roots) != 1 {
		t.Fatalf("%d run spans, want 1", len(roots))
	}
	root := roots[0]
	if ra := attrs(root.Attributes); root.Name != "run traced" || len(root.ParentSpanId) != 0 || !bytes.Equal(root.SpanId, runSpan[:]) ||
		ra[tracing.AttrRunID] != runID || ra[tracing.AttrRunStatus] != "completed" || root.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("run span %q: parent %x, id %x (want %s), attributes %v, status %v", root.Name, root.ParentSpanId, root.SpanId, runSpan, ra, root.Status)
	}
	if run.StartedAt.UnixNano() != int64(root.StartTimeUnixNano) || run.CompletedAt == nil || run.CompletedAt.UnixNano() != int64(root.EndTimeUnixNano) {
		t.Errorf("run span from %d to %d, want pgflow's %v to %v", root.StartTimeUnixNano, root.EndTimeUnixNano, run.StartedAt, run.CompletedAt)
	}
	indexes := map[int64]bool{}
	for step, list := range tasks {
		for _, s := range list {
			a := attrs(s.Attributes)
			if !bytes.Equal(s.ParentSpanId, runSpan[:]) {
				t.Errorf("task span %s: parent %x, want the run's span %s", s.Name, s.ParentSpanId, runSpan)
			}
			if s.StartTimeUnixNano < root.StartTimeUnixNano || s.EndTimeUnixNano > root.EndTimeUnixNano {
				t.Errorf("task span %s (%d to %d) outside its run's (%d to %d)", s.Name, s.StartTimeUnixNano, s.EndTimeUnixNano,
					root.StartTimeUnixNano, root.EndTimeUnixNano)
			}
			want := map[string]any{tracing.AttrRunID: runID, tracing.AttrFlow: "traced", tracing.AttrStep: step,
				tracing.AttrAttempt: int64(1), tracing.AttrEngine: "wazero", tracing.AttrOutcome: "succeeded"}
			for k, v := range want {
				if a[k] != v {
					t.Errorf("%s: %s = %v, want %v", s.Name, k, a[k], v)
				}
			}
			if w, _ := a[tracing.AttrWorker].(string); w == "" {
				t.Errorf("%s: no worker id", s.Name)
			}
			if f, _ := a[tracing.AttrFuel].(int64); f <= 0 {
				t.Errorf("%s: fuel %v, want the work done (wazero counts it)", s.Name, a[tracing.AttrFuel])
			}
			if step == "each" {
				indexes[a[tracing.AttrTaskIndex].(int64)] = true
			}
			if s.Name != "task traced/"+step {
				t.Errorf("span name %q", s.Name)
			}
		}
	}
	if len(indexes) != 3 || !indexes[0] || !indexes[1] || !indexes[2] {
		t.Errorf("map task indexes %v, want 0, 1, 2", indexes)
	}

	// Two requests: two client spans under the fetch task, each sent as traceparent.
	fetch := tasks["fetch"][0]
	if len(httpSpans) != 2 {
		t.Fatalf("%d HTTP spans, want 2", len(httpSpans))
	}
	sent := map[string]bool{}
	for _, tp := range traceparents {
		sent[tp] = true
	}
	apiHost := strings.TrimPrefix(api.URL, "http://")
	for _, s := range httpSpans {
		a := attrs(s.Attributes)
		if !bytes.Equal(s.ParentSpanId, fetch.SpanId) {
			t.Errorf("HTTP span's parent %x, want the fetch task's %x", s.ParentSpanId, fetch.SpanId)
		}
		want := map[string]any{"http.request.method": "GET", "server.address": "127.0.0.1", "http.response.status_code": int64(200),
			"http.response.body.size": int64(len("hello, trace")), "http.request.body.size": int64(0), tracing.AttrAllow: apiHost}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("HTTP span: %s = %v, want %v", k, a[k], v)
			}
		}
		tp := "00-" + wantTrace.String() + "-" + hex.EncodeToString(s.SpanId) + "-01"
		if !sent[tp] {
			t.Errorf("the API never got traceparent %s (got %v)", tp, traceparents)
		}
	}

	// Task log lines carry the run's trace id.
	withTrace := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["run_id"] != runID {
			continue
		}
		if rec["trace_id"] != wantTrace.String() {
			t.Errorf("log line of the run without its trace_id: %s", line)
		}
		withTrace++
	}
	if withTrace == 0 {
		t.Errorf("no log line of the run:\n%s", logs.String())
	}
	t.Logf("trace %s: %d task spans, %d HTTP spans, %d log lines with trace_id", wantTrace, 5, len(httpSpans), withTrace)
}
