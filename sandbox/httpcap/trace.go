package httpcap

import (
	"context"
	"net/http"
)

// RequestTracer follows each request a handler sends (every redirect hop is one), for
// traces. It comes with the task's context (WithRequestTracer), so the sandbox needs no
// tracing library and a task without one pays nothing.
type RequestTracer interface {
	// StartRequest is called before req is sent; allow is the http.allow entry it matched.
	// It may add headers to req (traceparent): req is the session's own copy. end is called
	// once: with the status and the body bytes sent and read, or with the error that left
	// no response.
	StartRequest(ctx context.Context, allow string, req *http.Request) (end func(status int, sent, received int64, err error))
}

type tracerKey struct{}

// WithRequestTracer returns ctx carrying t, which the task's HTTP requests report to.
func WithRequestTracer(ctx context.Context, t RequestTracer) context.Context {
	return context.WithValue(ctx, tracerKey{}, t)
}

func requestTracer(ctx context.Context) RequestTracer {
	t, _ := ctx.Value(tracerKey{}).(RequestTracer)
	return t
}
