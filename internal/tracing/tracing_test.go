package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

func TestTraceIDIsTheRunsOnEveryWorker(t *testing.T) {
	a, b := TraceID("0d9ba4e2-8b4c-4f3c-9a51-6f7f1c5f2a10"), TraceID("0d9ba4e2-8b4c-4f3c-9a51-6f7f1c5f2a11")
	if a != TraceID("0d9ba4e2-8b4c-4f3c-9a51-6f7f1c5f2a10") || a == b || !a.IsValid() {
		t.Errorf("TraceID: %s and %s", a, b)
	}
}

func TestFromEnvIsOffByDefault(t *testing.T) {
	for _, c := range []struct{ exporter, protocol, wantErr string }{
		{"", "", ""}, {"none", "", ""},
		{"zipkin", "", "otlp (or none)"},
		{"otlp", "grpc", "http/protobuf only"},
	} {
		t.Setenv("OTEL_TRACES_EXPORTER", c.exporter)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", c.protocol)
		tr, err := FromEnv(context.Background())
		if tr != nil || (c.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("exporter %q protocol %q: %v, %v", c.exporter, c.protocol, tr, err)
		}
	}
	var off *Tracer
	if h := off.Hooks(); h.TaskStarted != nil || off.Shutdown(context.Background()) != nil {
		t.Error("a nil Tracer traces")
	}
}

// The hooks on their own, into the SDK's in-memory exporter: a failed task's span says why.
func TestHooksSpanOfAFailedTask(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), exp, false)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	mine := pgflowtype.Hooks{TaskFinished: func(context.Context, pgflowtype.TaskInfo, pgflowtype.TaskResult) { order = append(order, "mine") }}
	h := pgflowtype.ChainHooks(mine, tr.Hooks())
	ti := pgflowtype.TaskInfo{FlowSlug: "f", StepSlug: "s", RunID: "run-1", TaskIndex: 2, Attempt: 3, WorkerID: "w", Engine: "wasmtime"}
	ctx := h.TaskStarted(context.Background(), ti)
	h.TaskFinished(ctx, ti, pgflowtype.TaskResult{Failed: true, Kind: "timeout", Error: "Task timed out after 1s", FuelUsed: 7})
	spans := exp.GetSpans()
	if len(spans) != 1 || len(order) != 1 {
		t.Fatalf("%d spans, hooks of mine %v", len(spans), order)
	}
	s := spans[0]
	got := map[string]any{}
	for _, kv := range s.Attributes {
		got[string(kv.Key)] = kv.Value.AsInterface()
	}
	for k, v := range map[string]any{AttrOutcome: "timed_out", AttrErrorKind: "timeout", AttrFuel: int64(7), AttrTaskIndex: int64(2), AttrAttempt: int64(3), AttrEngine: "wasmtime"} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if s.SpanContext.TraceID() != TraceID("run-1") || s.Status.Description != "Task timed out after 1s" {
		t.Errorf("span %s: trace %s, status %+v", s.Name, s.SpanContext.TraceID(), s.Status)
	}
}

func TestLogHandlerAddsTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil)))
	log.With("run_id", "run-1").Info("task line")
	log.Info("record line", "run_id", "run-2")
	log.Info("no run")
	want := []string{TraceID("run-1").String(), TraceID("run-2").String(), ""}
	for i, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if got, _ := rec["trace_id"].(string); got != want[i] {
			t.Errorf("line %d: trace_id %q, want %q", i, got, want[i])
		}
	}
}

// runOnce traces one run through the hooks: a task per index, then the run's end.
func runOnce(h pgflowtype.Hooks, runID, status string, tasks int) {
	began := time.Now()
	for i := range tasks {
		ti := pgflowtype.TaskInfo{FlowSlug: "f", StepSlug: "s", RunID: runID, TaskIndex: i, Attempt: 1}
		ctx := h.TaskStarted(context.Background(), ti)
		h.TaskFinished(ctx, ti, pgflowtype.TaskResult{Failed: status == "failed", Kind: "handler_error", Error: "no"})
	}
	h.RunEnded(context.Background(), pgflowtype.RunEnd{RunID: runID, FlowSlug: "f", Status: status, StartedAt: began, EndedAt: time.Now()})
}

// A run's end sends its root span, with the ids every task span named as its parent before
// it existed, and pgflow's times; a failed run's span is an error.
func TestRunSpanIsTheParentOfItsTasks(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), exp, false)
	if err != nil {
		t.Fatal(err)
	}
	runOnce(tr.Hooks(), "run-9", "failed", 2)
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 2 tasks and the run", len(spans))
	}
	root := spans[2]
	if root.Name != "run f" || root.SpanContext.SpanID() != RunSpanID("run-9") || root.SpanContext.TraceID() != TraceID("run-9") ||
		root.Parent.IsValid() || root.Status.Code != codes.Error {
		t.Errorf("run span %q: ids %s/%s, parent %v, status %+v", root.Name, root.SpanContext.TraceID(), root.SpanContext.SpanID(), root.Parent, root.Status)
	}
	for _, s := range spans[:2] {
		if s.Parent.SpanID() != RunSpanID("run-9") || s.Parent.TraceID() != TraceID("run-9") || s.StartTime.Before(root.StartTime) {
			t.Errorf("task span %q: parent %s, started %v before its run %v", s.Name, s.Parent.SpanID(), s.StartTime, root.StartTime)
		}
	}
	if RunSpanID("run-9") == RunSpanID("run-8") || !RunSpanID("run-9").IsValid() {
		t.Error("RunSpanID is not the run's own")
	}
}

// Ratio sampling keeps or drops whole runs: a run's task spans follow its root span's
// decision, which the trace id (the run id's hash) makes.
func TestRatioSamplingKeepsOrDropsWholeRuns(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), exp, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		runOnce(tr.Hooks(), fmt.Sprintf("run-%d", i), "completed", 3)
	}
	byTrace := map[string]int{}
	for _, s := range exp.GetSpans() {
		byTrace[s.SpanContext.TraceID().String()]++
	}
	for id, n := range byTrace {
		if n != 4 {
			t.Errorf("trace %s: %d spans kept, want all 4 (3 tasks and the run) or none", id, n)
		}
	}
	if len(byTrace) == 0 || len(byTrace) == 40 {
		t.Errorf("%d of 40 runs kept at ratio 0.5", len(byTrace))
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "jaeger_remote")
	if _, err := New(context.Background(), exp, false); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER=jaeger_remote") {
		t.Errorf("an unknown sampler: %v", err)
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "2")
	if _, err := New(context.Background(), exp, false); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER_ARG=2") {
		t.Errorf("a ratio of 2: %v", err)
	}
}
