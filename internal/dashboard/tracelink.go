package dashboard

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/internal/tracing"
)

// Placeholders of Config.TraceURL.
const (
	traceIDPlaceholder = "{trace_id}"
	runIDPlaceholder   = "{run_id}"
)

// CheckTraceURL refuses a trace URL template that could not link a run to its trace.
func CheckTraceURL(tmpl string) error {
	if tmpl == "" {
		return nil
	}
	if !strings.Contains(tmpl, traceIDPlaceholder) && !strings.Contains(tmpl, runIDPlaceholder) {
		return fmt.Errorf("trace URL %q has neither %s nor %s: the run page could not say which trace", tmpl, traceIDPlaceholder, runIDPlaceholder)
	}
	u, err := url.Parse(traceLink(tmpl, "00000000-0000-0000-0000-000000000000"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("trace URL %q is not an http(s) URL once filled in, e.g. https://tempo.example/trace/%s", tmpl, traceIDPlaceholder)
	}
	return nil
}

// traceLink is the link to a run's trace: the template with the run's trace id (the one
// package tracing gives all the run's spans, in hex) and run id filled in.
func traceLink(tmpl, runID string) string {
	if tmpl == "" {
		return ""
	}
	return strings.NewReplacer(traceIDPlaceholder, tracing.TraceID(runID).String(), runIDPlaceholder, url.PathEscape(runID)).Replace(tmpl)
}
