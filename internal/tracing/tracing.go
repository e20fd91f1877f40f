// Package tracing exports OpenTelemetry traces of the worker's runs: a root span per run,
// a child span per task, a child span per HTTP request its handler sends (with traceparent
// on the request), all spans of one run in one trace. It is built on the Client's Hooks and
// on the sandbox's httpcap.RequestTracer; off unless OTEL_TRACES_EXPORTER asks for it
// (FromEnv).
//
// The run's root span has an id derived from the run id too (RunSpanID), so every task span
// names it as its parent from the start, on any worker. The span itself is sent when the
// run ends, by the worker whose write ended it, with pgflow's start and end times: until
// then (and for a run that ends without a worker's write, failed by hand say) a trace
// viewer shows the tasks under a parent not received yet.
//
// A run's trace id is derived from its run id (TraceID), not stored: every worker that
// runs one of its tasks, on any machine, at any time, computes the same id without a
// database write on the task's path, whoever started the run (pgflow's client, SQL, this
// worker). It is a hash rather than the run's UUID itself so that its bits are uniform:
// ratio sampling (OTEL_TRACES_SAMPLER=traceidratio) then keeps or drops whole runs, the
// same way on every worker.
package tracing

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// Instrumentation scope of the spans.
const scope = "github.com/pgflow-wasm/pgflow-wasm"

// Span attribute keys (pgflow's names for what a task is).
const (
	AttrRunID     = "pgflow.run_id"
	AttrFlow      = "pgflow.flow_slug"
	AttrStep      = "pgflow.step_slug"
	AttrTaskIndex = "pgflow.task_index"
	AttrAttempt   = "pgflow.attempt"
	AttrWorker    = "pgflow.worker_id"
	AttrEngine    = "pgflow_wasm.engine"
	AttrFuel      = "pgflow_wasm.fuel_used"
	AttrOutcome   = "pgflow_wasm.outcome" // succeeded, failed, timed_out, cancelled
	AttrRunStatus = "pgflow.run_status"   // the run's root span: completed or failed
	AttrErrorKind = "pgflow_wasm.error_kind"
	AttrAllow     = "pgflow_wasm.http.allow" // the http.allow entry a request matched
)

// Tracer makes the spans. A nil *Tracer is off: its Hooks are empty.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	root     sdktrace.Sampler // decides for a run's trace (samplersFromEnv)
}

// New traces into exp. batch sends spans in batches (OTEL_BSP_* tune them), as a
// service should; without it each span is sent when it ends (tests).
func New(ctx context.Context, exp sdktrace.SpanExporter, batch bool) (*Tracer, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "pgflow-wasm"), attribute.String("service.version", buildinfo.Get().Version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithHost(), resource.WithProcessPID())
	if err != nil && res == nil {
		return nil, err
	}
	opt := sdktrace.WithSyncer(exp)
	if batch {
		opt = sdktrace.WithBatcher(exp)
	}
	sampler, root, err := samplersFromEnv()
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(opt, sdktrace.WithResource(res), sdktrace.WithIDGenerator(runIDs{}), sdktrace.WithSampler(sampler))
	return &Tracer{provider: tp, tracer: tp.Tracer(scope, trace.WithInstrumentationVersion(buildinfo.Get().Version)),
		prop: propagation.TraceContext{}, root: root}, nil
}

// samplersFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as the SDK does
// (default parentbased_always_on) and also returns the sampler that decides for a span
// without a parent: the run's root span, and so the sampled flag its task spans inherit.
func samplersFromEnv() (sampler, root sdktrace.Sampler, err error) {
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	ratio := 1.0
	if arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" && strings.HasSuffix(name, "traceidratio") {
		if ratio, err = strconv.ParseFloat(arg, 64); err != nil || ratio < 0 || ratio > 1 {
			return nil, nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%s: want a ratio between 0 and 1", arg)
		}
	}
	switch strings.TrimPrefix(name, "parentbased_") {
	case "", "always_on":
		root = sdktrace.AlwaysSample()
	case "always_off":
		root = sdktrace.NeverSample()
	case "traceidratio":
		root = sdktrace.TraceIDRatioBased(ratio)
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%s: pgflow-wasm samples with always_on, always_off, traceidratio "+
			"or their parentbased_ forms", name)
	}
	if name == "" || strings.HasPrefix(name, "parentbased_") {
		return sdktrace.ParentBased(root), root, nil
	}
	return root, root, nil
}

// FromEnv configures tracing from the standard OpenTelemetry variables. It is off (nil,
// nil) unless OTEL_TRACES_EXPORTER is "otlp": a worker that nobody asked to trace sends
// nothing. The OTLP exporter speaks http/protobuf (grpc is not compiled in) and reads its
// own variables: OTEL_EXPORTER_OTLP_ENDPOINT or _TRACES_ENDPOINT, _HEADERS, _TIMEOUT,
// _COMPRESSION, _CERTIFICATE...
func FromEnv(ctx context.Context) (*Tracer, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "none":
		return nil, nil
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: pgflow-wasm exports traces with otlp (or none)", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%s: pgflow-wasm sends OTLP as http/protobuf only (point it at the collector's HTTP port, 4318)", v, p)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return New(ctx, exp, true)
}

// Shutdown sends the spans still buffered and stops exporting.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// TraceID is the trace id of a run: the first 16 bytes of SHA-256 of its run id.
func TraceID(runID string) trace.TraceID {
	sum := sha256.Sum256([]byte("pgflow-run:" + runID))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// RunSpanID is the span id of a run's root span: the next 8 bytes of the same hash.
func RunSpanID(runID string) trace.SpanID {
	sum := sha256.Sum256([]byte("pgflow-run:" + runID))
	var id trace.SpanID
	copy(id[:], sum[16:24])
	return id
}

// runRootKey marks the context a run's root span starts in; its value is the run id.
type runRootKey struct{}

// runIDs gives a run's root span (runRootKey) the run's trace and span ids; every other
// span a random span id.
type runIDs struct{}

func (g runIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if runID, ok := ctx.Value(runRootKey{}).(string); ok {
		return TraceID(runID), RunSpanID(runID)
	}
	var id trace.TraceID
	for !id.IsValid() {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(hi>>(8*i)), byte(lo>>(8*i))
		}
	}
	return id, g.NewSpanID(ctx, id)
}

func (runIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		v := rand.Uint64()
		for i := range 8 {
			id[i] = byte(v >> (8 * i))
		}
	}
	return id
}

// Hooks are the worker hooks that trace tasks; give them to Config.Hooks (Chain keeps
// hooks of your own).
func (t *Tracer) Hooks() pgflowtype.Hooks {
	if t == nil {
		return pgflowtype.Hooks{}
	}
	return pgflowtype.Hooks{TaskStarted: t.taskStarted, TaskFinished: t.taskFinished, RunEnded: t.runEnded}
}

// runParent is the span context of a run's root span, as every task of the run names its
// parent: the sampled flag is the decision the root span gets when it is sent.
func (t *Tracer) runParent(runID string) trace.SpanContext {
	id := TraceID(runID)
	var flags trace.TraceFlags
	if t.root.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: id, Name: "run"}).Decision == sdktrace.RecordAndSample {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: id, SpanID: RunSpanID(runID), TraceFlags: flags, Remote: true})
}

// runEnded sends a run's root span, with pgflow's start and end of the run.
func (t *Tracer) runEnded(ctx context.Context, r pgflowtype.RunEnd) {
	ctx = context.WithValue(ctx, runRootKey{}, r.RunID)
	_, span := t.tracer.Start(ctx, "run "+r.FlowSlug, trace.WithNewRoot(), trace.WithTimestamp(r.StartedAt),
		trace.WithAttributes(
			attribute.String(AttrRunID, r.RunID),
			attribute.String(AttrFlow, r.FlowSlug),
			attribute.String(AttrRunStatus, r.Status),
		))
	if r.Status == "failed" {
		span.SetStatus(codes.Error, "run failed")
	}
	span.End(trace.WithTimestamp(r.EndedAt))
}

func (t *Tracer) taskStarted(ctx context.Context, ti pgflowtype.TaskInfo) context.Context {
	// Every task span is a child of its run's root span (runParent), whichever worker runs
	// it: the parent's ids come from the run id.
	ctx = trace.ContextWithRemoteSpanContext(ctx, t.runParent(ti.RunID))
	ctx, _ = t.tracer.Start(ctx, "task "+ti.FlowSlug+"/"+ti.StepSlug, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String(AttrRunID, ti.RunID),
			attribute.String(AttrFlow, ti.FlowSlug),
			attribute.String(AttrStep, ti.StepSlug),
			attribute.Int(AttrTaskIndex, ti.TaskIndex),
			attribute.Int(AttrAttempt, ti.Attempt),
			attribute.String(AttrWorker, ti.WorkerID),
			attribute.String(AttrEngine, ti.Engine),
		))
	return httpcap.WithRequestTracer(ctx, requestTracer{t})
}

func (t *Tracer) taskFinished(ctx context.Context, _ pgflowtype.TaskInfo, r pgflowtype.TaskResult) {
	span := trace.SpanFromContext(ctx)
	outcome := "succeeded"
	switch {
	case !r.Failed:
	case r.Kind == "timeout":
		outcome = "timed_out"
	case r.Kind == "cancelled":
		outcome = "cancelled"
	default:
		outcome = "failed"
	}
	span.SetAttributes(attribute.Int64(AttrFuel, r.FuelUsed), attribute.String(AttrOutcome, outcome))
	if r.Failed {
		span.SetAttributes(attribute.String(AttrErrorKind, r.Kind))
		span.SetStatus(codes.Error, truncate(r.Error, 1024))
	}
	span.End()
}

// requestTracer makes a client span per HTTP request of a handler and sends its context
// as traceparent. Attributes never hold the URL's path or query, where handlers put secrets.
type requestTracer struct{ t *Tracer }

func (rt requestTracer) StartRequest(ctx context.Context, allow string, req *http.Request) func(int, int64, int64, error) {
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Hostname()),
		attribute.String("url.scheme", req.URL.Scheme),
		attribute.String(AttrAllow, allow),
	}
	if p := req.URL.Port(); p != "" {
		var port int
		if _, err := fmt.Sscan(p, &port); err == nil {
			attrs = append(attrs, attribute.Int("server.port", port))
		}
	}
	ctx, span := rt.t.tracer.Start(ctx, "HTTP "+req.Method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	rt.t.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return func(status int, sent, received int64, err error) {
		span.SetAttributes(attribute.Int64("http.request.body.size", sent))
		if err != nil {
			span.SetAttributes(attribute.String("error.type", errorType(err)))
			span.SetStatus(codes.Error, truncate(err.Error(), 256))
		} else {
			span.SetAttributes(attribute.Int("http.response.status_code", status), attribute.Int64("http.response.body.size", received))
			if status >= 400 {
				span.SetAttributes(attribute.String("error.type", fmt.Sprint(status)))
				span.SetStatus(codes.Error, "")
			}
		}
		span.End()
	}
}

func errorType(err error) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "timeout"
	}
	return "network"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
