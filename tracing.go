package pgflowwasm

import (
	"context"
	"log/slog"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pgflow-wasm/pgflow-wasm/internal/tracing"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// Tracing traces runs with OpenTelemetry as `pgflow-wasm serve` does: a root span per run
// (sent when the run ends), a child span per task, a child span per HTTP request of its
// handler (with traceparent sent), all spans of a run in one trace whose id is derived from
// the run id (docs/deploy.md); DashboardOptions.TraceURL links run pages to it. A nil
// *Tracing is off.
//
//	tr, err := pgflowwasm.TracingFromEnv(ctx)
//	cfg.Hooks = tr.Hooks()
//	cfg.Logger = slog.New(tr.LogHandler(handler))
//	defer tr.Shutdown(ctx)
type Tracing struct{ t *tracing.Tracer }

// TracingFromEnv configures tracing from the standard OTEL_* variables: nil (off) unless
// OTEL_TRACES_EXPORTER=otlp; OTLP is sent as http/protobuf.
func TracingFromEnv(ctx context.Context) (*Tracing, error) {
	t, err := tracing.FromEnv(ctx)
	if t == nil || err != nil {
		return nil, err
	}
	return &Tracing{t}, nil
}

// NewTracing traces into an exporter of yours, in batches.
func NewTracing(ctx context.Context, exp sdktrace.SpanExporter) (*Tracing, error) {
	t, err := tracing.New(ctx, exp, true)
	if err != nil {
		return nil, err
	}
	return &Tracing{t}, nil
}

// Hooks trace each task; put them in Config.Hooks.
func (tr *Tracing) Hooks() pgflowtype.Hooks {
	if tr == nil {
		return pgflowtype.Hooks{}
	}
	return tr.t.Hooks()
}

// LogHandler adds trace_id to the log lines of tasks written through h.
func (tr *Tracing) LogHandler(h slog.Handler) slog.Handler {
	if tr == nil {
		return h
	}
	return tracing.LogHandler(h)
}

// Shutdown sends the spans still buffered; call it after Client.Stop.
func (tr *Tracing) Shutdown(ctx context.Context) error {
	if tr == nil {
		return nil
	}
	return tr.t.Shutdown(ctx)
}
