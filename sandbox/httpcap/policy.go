package httpcap

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

// Defaults of a step's http section.
const (
	DefaultMaxRequests      = 10
	DefaultMaxResponseBytes = 1 << 20
	DefaultMaxRequestBytes  = 1 << 20
	// MaxHeaderBytes caps the request headers a handler sends and the response headers it
	// gets back.
	MaxHeaderBytes = 64 << 10
	// MaxURLBytes caps a request URL.
	MaxURLBytes = 8 << 10
)

// Policy is one step's grant: what its handler may reach and how much. A Policy is
// read-only once built and shared by every task of the step.
type Policy struct {
	Allow            []Pattern
	MaxRequests      int   // per task, redirect hops included; 0 takes the default
	MaxRequestBytes  int64 // request body; 0 takes the default
	MaxResponseBytes int64 // response body; 0 takes the default
	// Resolver looks names up; nil uses the system's (net.DefaultResolver).
	Resolver Resolver
	// TLS, when set, replaces the default TLS client settings (tests trust their own CA).
	TLS *tls.Config
}

// Resolver is the part of *net.Resolver the policy uses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Observer receives what a step's handlers do over HTTP, for metrics. host is the allow
// entry that matched (bounded by flows.yaml, whatever URLs a handler makes up).
type Observer interface {
	// Request reports one request sent (each redirect hop is one): result is the status
	// class ("2xx".."5xx") or why it got no response ("network", "timeout", or "canceled" by
	// the handler), took the time
	// to the response headers.
	Request(host, result string, took time.Duration)
	// Bytes reports the body bytes of one request sent and of its response read.
	Bytes(host string, sent, received int64)
	// Denied reports a request the policy refused, by reason (an Error's Reason).
	Denied(reason string)
}

// Error is a request the policy refused or that failed. Code is one of the ABI's error
// codes (abi.Err*); Message says what happened and what to change, and never holds a
// URL's path or query, a header value or a body (where handlers put secrets).
type Error struct {
	Code    int32
	Reason  string // short and fixed, for metrics: "host_not_allowed", ...
	Message string
}

func (e *Error) Error() string { return e.Message }

// Reasons of Errors, one per code.
var reasons = map[int32]string{
	abi.ErrDenied:           "denied",
	abi.ErrHostNotAllowed:   "host_not_allowed",
	abi.ErrAddressRefused:   "address_refused",
	abi.ErrTooManyRequests:  "too_many_requests",
	abi.ErrResponseTooLarge: "response_too_large",
	abi.ErrRequestTooLarge:  "request_too_large",
	abi.ErrBadRequest:       "bad_request",
	abi.ErrNetwork:          "network",
	abi.ErrTooManyRedirects: "too_many_redirects",
	abi.ErrCanceled:         "canceled",
}

func newError(code int32, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reasons[code], Message: "http: " + fmt.Sprintf(format, args...)}
}

// Denied is the Error of a step without an http section: where names the step.
func Denied(where string) *Error {
	return newError(abi.ErrDenied, "%s may not make HTTP requests: it has no `http` key in flows.yaml (grant hosts with http.allow)", where)
}

func (p *Policy) maxRequests() int {
	if p.MaxRequests > 0 {
		return p.MaxRequests
	}
	return DefaultMaxRequests
}

func (p *Policy) maxRequestBytes() int64 {
	if p.MaxRequestBytes > 0 {
		return p.MaxRequestBytes
	}
	return DefaultMaxRequestBytes
}

func (p *Policy) maxResponseBytes() int64 {
	if p.MaxResponseBytes > 0 {
		return p.MaxResponseBytes
	}
	return DefaultMaxResponseBytes
}

func (p *Policy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// allowed returns the first allow entry covering t.
func (p *Policy) allowed(t target) (Pattern, bool) {
	for _, e := range p.Allow {
		if e.match(t) {
			return e, true
		}
	}
	return Pattern{}, false
}

// namesAddress reports whether an allow entry names the special address a on port.
func (p *Policy) namesAddress(a netip.Addr, port int) bool {
	for _, e := range p.Allow {
		if e.namesAddress(a, port) {
			return true
		}
	}
	return false
}

// allowText lists the allow entries for messages.
func (p *Policy) allowText() string {
	const most = 8
	var parts []string
	for i, e := range p.Allow {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(p.Allow)-most))
			break
		}
		parts = append(parts, e.text)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
