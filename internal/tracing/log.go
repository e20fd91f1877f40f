package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds trace_id to the log lines of tasks, so a line leads to its trace: from
// the span in the record's context, or else from the line's run_id (the trace id is the
// run's, TraceID), which also covers lines written outside the task's span (its outcome,
// its cancellation).
func LogHandler(h slog.Handler) slog.Handler { return logHandler{next: h} }

type logHandler struct {
	next    slog.Handler
	traceID string // from a run_id given to WithAttrs
}

func (h logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	id := h.traceID
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		id = sc.TraceID().String()
		r.AddAttrs(slog.String("span_id", sc.SpanID().String()))
	} else if id == "" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "run_id" {
				id = TraceID(a.Value.String()).String()
				return false
			}
			return true
		})
	}
	if id != "" {
		r.AddAttrs(slog.String("trace_id", id))
	}
	return h.next.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := logHandler{next: h.next.WithAttrs(attrs), traceID: h.traceID}
	for _, a := range attrs {
		if a.Key == "run_id" {
			out.traceID = TraceID(a.Value.String()).String()
		}
	}
	return out
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{next: h.next.WithGroup(name), traceID: h.traceID}
}
