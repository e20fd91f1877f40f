package httpcap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// Request is what a handler asks for. Header holds "Name: value" lines separated by "\n"
// (a "\r" before it is ignored).
type Request struct {
	Method string // "" is GET
	URL    string
	Header []byte
	Body   []byte
}

// Response is what came back. Header holds "Name: value\n" lines, names in canonical
// form, sorted by name, one line per value.
type Response struct {
	Status int
	Header []byte
	Body   []byte
}

// Session is one task's use of a Policy: it counts the task's requests and owns its
// connections. Not safe for concurrent use (a guest makes one call at a time), and one
// request at a time: Do and Start refuse while a started Call runs. Close it when the task
// ends: that also cancels a running Call.
type Session struct {
	p       *Policy
	where   string // names the step in messages
	obs     Observer
	sent    int // requests sent in this task, redirect hops included
	tr      *http.Transport
	client  *http.Client
	running *Call // the last Call started; it owns the session's counters until it is done
}

// NewSession starts one task's use of the policy. where names the step in messages
// (`step "charge" of flow "orders" (flows.yaml:12)`); obs may be nil.
func (p *Policy) NewSession(where string, obs Observer) *Session {
	if obs == nil {
		obs = nopObserver{}
	}
	s := &Session{p: p, where: where, obs: obs}
	s.tr = &http.Transport{
		Proxy:                  nil, // never the environment's proxy: it would bypass the address checks
		DialContext:            s.dial,
		TLSClientConfig:        p.TLS.Clone(),
		DisableCompression:     true, // the handler gets the bytes the server sent, under the same cap
		MaxResponseHeaderBytes: MaxHeaderBytes,
		MaxIdleConnsPerHost:    2,
	}
	s.client = &http.Client{Transport: countingTransport{s}, CheckRedirect: s.checkRedirect}
	return s
}

// Close cancels a Call still running, waits for its goroutine, and drops the task's
// connections.
func (s *Session) Close() {
	if s.running != nil {
		s.running.Cancel()
		s.running = nil
	}
	s.tr.CloseIdleConnections()
}

// Do sends one request under the policy and waits for its response. The context's
// deadline (the task's) ends it. Every failure is an *Error: refused by the policy, or
// failed on the network (Reason "timeout" when ctx ended first).
func (s *Session) Do(ctx context.Context, r Request) (*Response, *Error) {
	req, err := s.prepare(ctx, r)
	if err != nil {
		return nil, err
	}
	return s.send(ctx, req)
}

// prepare checks a request before anything is sent, counting a refusal as a denial, and
// refuses it while a started Call runs.
func (s *Session) prepare(ctx context.Context, r Request) (*http.Request, *Error) {
	if s.running != nil {
		select {
		case <-s.running.done:
			s.running = nil
		default:
			return nil, newError(abi.ErrBadRequest, "a request is already running in this task: wait for it to end, or cancel it, before sending another")
		}
	}
	req, err := s.build(ctx, r)
	if err != nil {
		s.obs.Denied(err.Reason)
		return nil, err
	}
	return req, nil
}

// send sends a checked request and reads its response.
func (s *Session) send(ctx context.Context, req *http.Request) (*Response, *Error) {
	resp, doErr := s.client.Do(req)
	if doErr != nil {
		return nil, s.failure(ctx, req, doErr)
	}
	defer resp.Body.Close()
	t, _ := parseTarget(resp.Request.URL)
	limit := s.p.maxResponseBytes()
	tooLarge := func() *Error {
		s.obs.Denied(reasons[abi.ErrResponseTooLarge])
		return newError(abi.ErrResponseTooLarge, "the response body from %s is over the %s of http.max_response_bytes of %s",
			t, bytesize.Text(uint64(limit)), s.where)
	}
	if resp.ContentLength > limit {
		return nil, tooLarge()
	}
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if readErr != nil {
		return nil, s.failure(ctx, resp.Request, readErr)
	}
	if int64(len(body)) > limit {
		return nil, tooLarge()
	}
	return &Response{Status: resp.StatusCode, Header: headerText(resp.Header), Body: body}, nil
}

// build checks a request before anything is sent: method, URL, allow-list, headers, size.
func (s *Session) build(ctx context.Context, r Request) (*http.Request, *Error) {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	if !validToken(method) || len(method) > 32 {
		return nil, newError(abi.ErrBadRequest, "the method is not a valid HTTP method (an upper-case word like GET or POST)")
	}
	if method == http.MethodConnect {
		return nil, newError(abi.ErrBadRequest, "the method CONNECT is not allowed")
	}
	if len(r.URL) > MaxURLBytes {
		return nil, newError(abi.ErrRequestTooLarge, "the URL is %s long, over the cap of %s", bytesize.Text(uint64(len(r.URL))), bytesize.Text(uint64(MaxURLBytes)))
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, which may hold a secret
		}
		return nil, newError(abi.ErrBadRequest, "the URL is not valid: %v", err)
	}
	t, e := parseTarget(u)
	if e != nil {
		return nil, e
	}
	if _, ok := s.p.allowed(t); !ok {
		return nil, s.notAllowed(t, "")
	}
	if n := int64(len(r.Body)); n > s.p.maxRequestBytes() {
		return nil, newError(abi.ErrRequestTooLarge, "the request body of %s is over the %s of http.max_request_bytes of %s",
			bytesize.Text(uint64(n)), bytesize.Text(uint64(s.p.maxRequestBytes())), s.where)
	}
	header, e := parseHeader(r.Header)
	if e != nil {
		return nil, e
	}
	// The body is copied: net/http may still read it after Do returns, and guest memory
	// is the guest's again by then.
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(bytes.Clone(r.Body))
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, newError(abi.ErrBadRequest, "the request is not valid: %v", unwrapURLError(err))
	}
	req.Header = header
	return req, nil
}

func (s *Session) notAllowed(t target, prefix string) *Error {
	return newError(abi.ErrHostNotAllowed, "%shost %s is not allowed: it matches no entry of http.allow of %s: %s",
		prefix, t, s.where, s.p.allowText())
}

// checkRedirect applies the allow-list to every hop (the address check happens when
// the hop connects) and caps the number of redirects.
func (s *Session) checkRedirect(req *http.Request, via []*http.Request) error {
	from, _ := parseTarget(via[len(via)-1].URL)
	if len(via) > abi.MaxRedirects {
		first, _ := parseTarget(via[0].URL)
		return newError(abi.ErrTooManyRedirects, "more than %d redirects, starting at %s", abi.MaxRedirects, first)
	}
	t, e := parseTarget(req.URL)
	if e != nil {
		e.Message = strings.Replace(e.Message, "http: ", fmt.Sprintf("http: redirect from %s refused: ", from), 1)
		return e
	}
	if _, ok := s.p.allowed(t); !ok {
		return s.notAllowed(t, fmt.Sprintf("redirect from %s to %s refused: ", from, t))
	}
	return nil
}

// failure turns an error of the client into an *Error, counting refusals as denials.
func (s *Session) failure(ctx context.Context, req *http.Request, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		s.obs.Denied(e.Reason)
		return e
	}
	t, _ := parseTarget(req.URL)
	if context.Cause(ctx) == errCanceled {
		return newError(abi.ErrCanceled, "%s %s was canceled by the handler", req.Method, t)
	}
	if ctx.Err() != nil {
		e = newError(abi.ErrNetwork, "%s %s: the task's deadline passed while waiting for the response", req.Method, t)
		e.Reason = "timeout"
		return e
	}
	return newError(abi.ErrNetwork, "%s %s failed: %v", req.Method, t, networkText(err))
}

// networkText is a network error without the URL net/http wraps it in.
func networkText(err error) string {
	err = unwrapURLError(err)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the server closed the connection before the response was complete"
	}
	return err.Error()
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// dial resolves the host once, refuses special addresses that no allow entry names, and
// connects to the checked address itself: no second lookup, so no DNS-rebinding window.
func (s *Session) dial(ctx context.Context, _, hostPort string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portText)
	var addrs []netip.Addr
	literal := false
	if a, err := netip.ParseAddr(host); err == nil {
		addrs, literal = []netip.Addr{a}, true
	} else {
		addrs, err = s.p.resolver().LookupNetIP(ctx, "ip", host)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, newError(abi.ErrNetwork, "cannot resolve %s: %v", host, err)
		}
		if len(addrs) == 0 {
			return nil, newError(abi.ErrNetwork, "cannot resolve %s: no addresses", host)
		}
	}
	for i, a := range addrs {
		a = a.Unmap()
		addrs[i] = a
		if c := Classify(a); c != Public && !s.p.namesAddress(a, port) {
			what := fmt.Sprintf("%s resolves to %s, a %s address", net.JoinHostPort(host, portText), a, c)
			if literal {
				what = fmt.Sprintf("%s is a %s address", net.JoinHostPort(a.String(), portText), c)
			}
			return nil, newError(abi.ErrAddressRefused, "%s: refused, since no http.allow entry of %s names that address (an entry %q would)",
				what, s.where, net.JoinHostPort(a.String(), portText))
		}
	}
	var d net.Dialer
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// countingTransport counts and observes every request sent, redirect hops included.
type countingTransport struct{ s *Session }

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s := c.s
	if s.sent >= s.p.maxRequests() {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, newError(abi.ErrTooManyRequests, "request %d refused: %s allows %d requests per task (http.max_requests; redirects count)",
			s.sent+1, s.where, s.p.maxRequests())
	}
	s.sent++
	label := "other"
	if t, err := parseTarget(req.URL); err == nil {
		if e, ok := s.p.allowed(t); ok {
			label = e.text
		}
	}
	sent := max(req.ContentLength, 0)
	end := func(int, int64, int64, error) {}
	if rt := requestTracer(req.Context()); rt != nil {
		// A copy: the tracer adds headers, and a RoundTripper must not change its request.
		req = req.Clone(req.Context())
		end = rt.StartRequest(req.Context(), label, req)
	}
	start := time.Now()
	resp, err := s.tr.RoundTrip(req)
	took := time.Since(start)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			result := "network"
			if context.Cause(req.Context()) == errCanceled {
				result = "canceled"
			} else if req.Context().Err() != nil {
				result = "timeout"
			}
			s.obs.Request(label, result, took)
			s.obs.Bytes(label, sent, 0)
		}
		end(0, sent, 0, err)
		return nil, err
	}
	s.obs.Request(label, fmt.Sprintf("%dxx", resp.StatusCode/100), took)
	status := resp.StatusCode
	resp.Body = &countingBody{ReadCloser: resp.Body, done: func(n int64) {
		s.obs.Bytes(label, sent, n)
		end(status, sent, n, nil)
	}}
	return resp, nil
}

// countingBody reports the bytes read from a response body when it is closed.
type countingBody struct {
	io.ReadCloser
	n    int64
	done func(int64)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countingBody) Close() error {
	if b.done != nil {
		b.done(b.n)
		b.done = nil
	}
	return b.ReadCloser.Close()
}

// target is the host and port a URL reaches, normalised for matching.
type target struct {
	host        string     // lower-case name without a trailing dot, or the address text
	addr        netip.Addr // valid for an IP address
	port        int
	defaultPort int
}

func (t target) String() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

func parseTarget(u *url.URL) (target, *Error) {
	var t target
	switch u.Scheme {
	case "http":
		t.defaultPort = 80
	case "https":
		t.defaultPort = 443
	default:
		return t, newError(abi.ErrBadRequest, "the URL scheme %q is not supported: use http or https", truncate(u.Scheme, 16))
	}
	if u.Opaque != "" || u.Host == "" {
		return t, newError(abi.ErrBadRequest, "the URL has no host: write scheme://host[:port]/path")
	}
	if u.User != nil {
		return t, newError(abi.ErrBadRequest, "the URL holds credentials (user@host): send them in an Authorization header instead")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return t, newError(abi.ErrBadRequest, "the URL's IPv6 address has a zone: zones are not supported")
		}
		t.addr, t.host = a.Unmap(), a.Unmap().String()
	} else if strings.HasPrefix(u.Host, "[") {
		return t, newError(abi.ErrBadRequest, "the URL's host in brackets is not an IPv6 address")
	} else if err := checkName(host); err != nil {
		return t, newError(abi.ErrBadRequest, "the URL's %v", err)
	} else {
		t.host = host
	}
	t.port = t.defaultPort
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return t, newError(abi.ErrBadRequest, "the URL's port must be a number from 1 to 65535")
		}
		t.port = n
	}
	return t, nil
}

// forbiddenHeaders are set by the client itself: a handler setting them could smuggle a
// second request or address another host over an allowed connection.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Proxy-Authorization": true, "Proxy-Connection": true,
}

// parseHeader reads "Name: value" lines. Messages name the header, never its value.
func parseHeader(raw []byte) (http.Header, *Error) {
	if len(raw) > MaxHeaderBytes {
		return nil, newError(abi.ErrRequestTooLarge, "the request headers are %s, over the cap of %s", bytesize.Text(uint64(len(raw))), bytesize.Text(uint64(MaxHeaderBytes)))
	}
	h := http.Header{}
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !validToken(name) || len(name) > 256 {
			return nil, newError(abi.ErrBadRequest, "header line %d is not `Name: value` with a name of letters, digits and -", i+1)
		}
		key := http.CanonicalHeaderKey(name)
		value = strings.Trim(value, " \t")
		if strings.ContainsFunc(value, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) {
			return nil, newError(abi.ErrBadRequest, "header %s has a control character in its value", key)
		}
		if forbiddenHeaders[key] || strings.HasPrefix(key, "Proxy-") {
			return nil, newError(abi.ErrBadRequest, "header %s is set by the worker, not by handlers", key)
		}
		h.Add(key, value)
	}
	return h, nil
}

// validToken reports whether s is an HTTP token (RFC 9110 tchar).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// headerText renders response headers as "Name: value\n" lines, sorted by name.
func headerText(h http.Header) []byte {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		for _, v := range h[k] {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, '\n')
		}
	}
	return b
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

type nopObserver struct{}

func (nopObserver) Request(string, string, time.Duration) {}
func (nopObserver) Bytes(string, int64, int64)            {}
func (nopObserver) Denied(string)                         {}
