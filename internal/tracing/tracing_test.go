package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

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
