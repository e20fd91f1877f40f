package httpcap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

const where = `step "fetch" of flow "demo" (flows.yaml:7)`

// server is a test server on 127.0.0.1 with the routes the tests use.
func server(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "b")
		w.Header().Add("X-Multi", "a")
		fmt.Fprintf(w, `{"method":%q,"token":%q,"body":%q}`, r.Method, r.Header.Get("Authorization"), readAll(r.Body))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no such thing", http.StatusNotFound) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(make([]byte, 2048)) })
	mux.HandleFunc("/big-chunked", func(w http.ResponseWriter, r *http.Request) {
		for range 4 {
			_, _ = w.Write(make([]byte, 1024))
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}

// policy builds a policy from allow entries.
func policy(t *testing.T, allow ...string) *Policy {
	t.Helper()
	p := &Policy{}
	for _, a := range allow {
		pat, err := ParsePattern(a)
		if err != nil {
			t.Fatal(err)
		}
		p.Allow = append(p.Allow, pat)
	}
	return p
}

func hostPort(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

func port(srv *httptest.Server) string {
	_, p, _ := net.SplitHostPort(hostPort(srv))
	return p
}

// fakeResolver answers from a table and counts lookups.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr // per name, one answer per lookup (the last repeats)
	lookups map[string]int
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookups == nil {
		f.lookups = map[string]int{}
	}
	as, ok := f.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(f.lookups[host], len(as)-1)
	f.lookups[host]++
	return append([]netip.Addr(nil), as[i]...), nil
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// counts is an Observer that records everything.
type counts struct {
	mu       sync.Mutex
	requests map[string]int // "host result"
	sent     int64
	received int64
	denied   map[string]int
}

func (c *counts) Request(host, result string, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.requests == nil {
		c.requests = map[string]int{}
	}
	c.requests[host+" "+result]++
}

func (c *counts) Bytes(_ string, sent, received int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent += sent
	c.received += received
}

func (c *counts) Denied(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.denied == nil {
		c.denied = map[string]int{}
	}
	c.denied[reason]++
}

func do(t *testing.T, p *Policy, obs Observer, r Request) (*Response, *Error) {
	t.Helper()
	s := p.NewSession(where, obs)
	defer s.Close()
	return s.Do(context.Background(), r)
}

func wantError(t *testing.T, err *Error, code int32, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error code %d, got success", code)
	}
	if err.Code != code {
		t.Fatalf("error code %d (%s), want %d", err.Code, err.Message, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Message, p) {
			t.Errorf("message %q does not contain %q", err.Message, p)
		}
	}
}

func TestAllowedRequest(t *testing.T) {
	t.Parallel()
	srv := server(t)
	obs := &counts{}
	p := policy(t, hostPort(srv))
	resp, err := do(t, p, obs, Request{Method: "POST", URL: srv.URL + "/hello",
		Header: []byte("Authorization: Bearer s3cret\r\nX-Empty:\n\n"), Body: []byte("ping")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || string(resp.Body) != `{"method":"POST","token":"Bearer s3cret","body":"ping"}` {
		t.Fatalf("response %d %s", resp.Status, resp.Body)
	}
	if h := string(resp.Header); !strings.HasPrefix(h, "Content-Length: 55\nContent-Type: application/json\nDate: ") ||
		!strings.HasSuffix(h, "X-Multi: b\nX-Multi: a\n") {
		t.Errorf("headers:\n%s", h)
	}
	if obs.requests[hostPort(srv)+" 2xx"] != 1 || obs.sent != 4 || obs.received != 55 || len(obs.denied) != 0 {
		t.Errorf("observed %+v", obs)
	}
}

// An HTTP error status is a response, not a failure.
func TestErrorStatusIsAResponse(t *testing.T) {
	t.Parallel()
	srv := server(t)
	resp, err := do(t, policy(t, hostPort(srv)), nil, Request{URL: srv.URL + "/missing"})
	if err != nil || resp.Status != 404 || string(resp.Body) != "no such thing\n" {
		t.Fatalf("%+v %v", resp, err)
	}
}

func TestHTTPS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure") }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below is expected
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	p := policy(t, strings.TrimPrefix(srv.URL, "https://"))
	p.TLS = &tls.Config{RootCAs: roots}
	resp, err := do(t, p, nil, Request{URL: srv.URL})
	if err != nil || string(resp.Body) != "secure" {
		t.Fatalf("%+v %v", resp, err)
	}
	// Without the test CA the certificate is refused: TLS is verified.
	p.TLS = nil
	_, err = do(t, p, nil, Request{URL: srv.URL})
	wantError(t, err, abi.ErrNetwork, "certificate")
}

func TestHostNotAllowed(t *testing.T) {
	t.Parallel()
	srv := server(t)
	res := &fakeResolver{}
	p := policy(t, hostPort(srv), "api.example.com")
	p.Resolver = res
	obs := &counts{}
	for _, url := range []string{
		"http://evil.example/",
		"http://api.example.com:8080/", // the entry has no port: 80 for http only
		"https://API.example.com.:444/",
		"http://127.0.0.1:1/",                 // another port of the same address
		"http://localhost:" + port(srv) + "/", // a name of the allowed address is another host
	} {
		_, err := do(t, p, obs, Request{URL: url})
		wantError(t, err, abi.ErrHostNotAllowed, "is not allowed: it matches no entry of http.allow of "+where+": ["+hostPort(srv)+", api.example.com]")
	}
	if len(res.lookups) != 0 {
		t.Errorf("names were resolved for hosts that are not allowed: %v", res.lookups)
	}
	if obs.denied["host_not_allowed"] != 5 || len(obs.requests) != 0 {
		t.Errorf("observed %+v", obs)
	}
}

func TestRedirects(t *testing.T) {
	t.Parallel()
	srv := server(t)
	other := server(t)
	p := policy(t, hostPort(srv))
	p.MaxRequests = 50

	// To an allowed host: followed.
	resp, err := do(t, p, nil, Request{URL: srv.URL + "/redirect?to=/missing"})
	if err != nil || resp.Status != 404 {
		t.Fatalf("%+v %v", resp, err)
	}
	// To a host that is not allowed: refused before it is contacted.
	_, err = do(t, p, nil, Request{URL: srv.URL + "/redirect?to=" + other.URL + "/hello"})
	wantError(t, err, abi.ErrHostNotAllowed, "http: redirect from "+hostPort(srv)+" to "+hostPort(other)+" refused: host "+hostPort(other)+" is not allowed")
	// To another scheme.
	_, err = do(t, p, nil, Request{URL: srv.URL + "/redirect?to=ftp://" + hostPort(srv) + "/"})
	wantError(t, err, abi.ErrBadRequest, "http: redirect from "+hostPort(srv)+" refused: the URL scheme \"ftp\" is not supported")
	// In a loop.
	_, err = do(t, p, nil, Request{URL: srv.URL + "/loop"})
	wantError(t, err, abi.ErrTooManyRedirects, "more than 10 redirects, starting at "+hostPort(srv))

	// A redirect to a name that resolves to a special address is refused when it connects.
	res := &fakeResolver{answers: map[string][][]netip.Addr{"metadata.test": {addrs("169.254.169.254")}}}
	p = policy(t, hostPort(srv), "metadata.test")
	p.Resolver = res
	_, err = do(t, p, nil, Request{URL: srv.URL + "/redirect?to=http://metadata.test/latest/"})
	wantError(t, err, abi.ErrAddressRefused, "metadata.test:80 resolves to 169.254.169.254, a cloud metadata address: refused")
}

func TestSpecialAddresses(t *testing.T) {
	t.Parallel()
	srv := server(t)
	p := port(srv)
	res := &fakeResolver{answers: map[string][][]netip.Addr{
		"api.test":     {addrs("127.0.0.1")},
		"mapped.test":  {addrs("::ffff:127.0.0.1")},
		"dual.test":    {addrs("93.184.216.34", "10.0.0.7")},
		"private.test": {addrs("192.168.1.20")},
		"v6.test":      {addrs("fd00:ec2::254")},
	}}
	for _, tc := range []struct {
		allow []string
		url   string
		want  string
	}{
		{[]string{"api.test:" + p}, "http://api.test:" + p + "/hello", "api.test:" + p + " resolves to 127.0.0.1, a loopback address: refused, since no http.allow entry of " + where + ` names that address (an entry "127.0.0.1:` + p + `" would)`},
		{[]string{"mapped.test:" + p}, "http://mapped.test:" + p + "/hello", "resolves to 127.0.0.1, a loopback address"},
		{[]string{"dual.test"}, "http://dual.test/", "resolves to 10.0.0.7, a private address"},
		{[]string{"*"}, "http://private.test/", "resolves to 192.168.1.20, a private address"},
		{[]string{"*"}, "http://v6.test/", "resolves to fd00:ec2::254, a cloud metadata address"},
		{[]string{"*"}, "http://169.254.169.254/latest/meta-data/", "169.254.169.254:80 is a cloud metadata address: refused"},
		{[]string{"*"}, "http://[::ffff:169.254.169.254]/", "169.254.169.254:80 is a cloud metadata address"},
		{[]string{"*"}, "http://[fd00:ec2::254]/", "[fd00:ec2::254]:80 is a cloud metadata address"},
		{[]string{"*"}, "http://[64:ff9b::a9fe:a9fe]/", "[64:ff9b::a9fe:a9fe]:80 is a cloud metadata address"},
		{[]string{"*:*"}, "http://127.0.0.1:" + p + "/hello", "127.0.0.1:" + p + " is a loopback address"},
		{[]string{"*:*"}, "http://[::1]:" + p + "/", "[::1]:" + p + " is a loopback address"},
		{[]string{"*:*"}, "http://0.0.0.0:" + p + "/", "0.0.0.0:" + p + " is a unspecified address"},
		{[]string{"127.0.0.1:1"}, "http://[::ffff:127.0.0.1]:" + p + "/", "is not allowed"},
	} {
		pol := policy(t, tc.allow...)
		pol.Resolver = res
		_, err := do(t, pol, nil, Request{URL: tc.url})
		if err == nil || !strings.Contains(err.Message, tc.want) {
			t.Errorf("allow %v, GET %s: %v, want %q", tc.allow, tc.url, err, tc.want)
		}
	}

	// An entry naming the address itself reaches it, also through a name and in mapped form.
	for _, tc := range []struct {
		allow []string
		url   string
	}{
		{[]string{"127.0.0.1:" + p}, "http://127.0.0.1:" + p + "/hello"},
		{[]string{"127.0.0.1:" + p}, "http://[::ffff:127.0.0.1]:" + p + "/hello"},
		{[]string{"api.test:" + p, "127.0.0.1:" + p}, "http://api.test:" + p + "/hello"},
	} {
		pol := policy(t, tc.allow...)
		pol.Resolver = res
		resp, err := do(t, pol, nil, Request{URL: tc.url})
		if err != nil || resp.Status != 200 {
			t.Errorf("allow %v, GET %s: %+v %v", tc.allow, tc.url, resp, err)
		}
	}
}

// A name is looked up once per connection and the connection goes to the address that
// was checked: a second answer (DNS rebinding) is never used.
func TestPinnedToTheCheckedAddress(t *testing.T) {
	t.Parallel()
	srv := server(t)
	p := port(srv)
	res := &fakeResolver{answers: map[string][][]netip.Addr{"rebind.test": {addrs("127.0.0.1"), addrs("169.254.169.254")}}}
	pol := policy(t, "rebind.test:"+p, "127.0.0.1:"+p)
	pol.Resolver = res
	s := pol.NewSession(where, nil)
	defer s.Close()
	for range 3 {
		resp, err := s.Do(context.Background(), Request{URL: "http://rebind.test:" + p + "/hello"})
		if err != nil || resp.Status != 200 {
			t.Fatalf("%+v %v", resp, err)
		}
	}
	if n := res.lookups["rebind.test"]; n != 1 {
		t.Errorf("rebind.test was looked up %d times for one kept-alive connection, want 1", n)
	}
	// A new connection (new task) looks the name up again and gets the metadata address: refused.
	_, err := do(t, pol, nil, Request{URL: "http://rebind.test:" + p + "/hello"})
	wantError(t, err, abi.ErrAddressRefused, "resolves to 169.254.169.254, a cloud metadata address")
}

func TestSizeCaps(t *testing.T) {
	t.Parallel()
	srv := server(t)
	p := policy(t, hostPort(srv))
	p.MaxResponseBytes = 1024
	p.MaxRequestBytes = 10
	obs := &counts{}
	for _, path := range []string{"/big", "/big-chunked"} {
		_, err := do(t, p, obs, Request{URL: srv.URL + path})
		wantError(t, err, abi.ErrResponseTooLarge, "http: the response body from "+hostPort(srv)+" is over the 1 KiB of http.max_response_bytes of "+where)
	}
	_, err := do(t, p, obs, Request{Method: "POST", URL: srv.URL + "/hello", Body: make([]byte, 11)})
	wantError(t, err, abi.ErrRequestTooLarge, "the request body of 11 bytes is over the 10 bytes of http.max_request_bytes of "+where)
	_, err = do(t, p, obs, Request{URL: srv.URL + "/hello", Header: []byte("X-Big: " + strings.Repeat("x", MaxHeaderBytes))})
	wantError(t, err, abi.ErrRequestTooLarge, "request headers are 64.0 KiB, over the cap of 64 KiB")
	_, err = do(t, p, obs, Request{URL: srv.URL + "/hello?" + strings.Repeat("x", MaxURLBytes)})
	wantError(t, err, abi.ErrRequestTooLarge, "over the cap of 8 KiB")
	// Exactly at the cap is fine.
	p.MaxResponseBytes = 2048
	if resp, err := do(t, p, obs, Request{URL: srv.URL + "/big"}); err != nil || len(resp.Body) != 2048 {
		t.Fatalf("%v", err)
	}
	if obs.denied["response_too_large"] != 2 || obs.denied["request_too_large"] != 3 {
		t.Errorf("denials %v", obs.denied)
	}
}

func TestRequestCount(t *testing.T) {
	t.Parallel()
	srv := server(t)
	p := policy(t, hostPort(srv))
	p.MaxRequests = 3
	s := p.NewSession(where, nil)
	defer s.Close()
	for i := range 3 {
		if _, err := s.Do(context.Background(), Request{URL: srv.URL + "/hello"}); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	_, err := s.Do(context.Background(), Request{URL: srv.URL + "/hello"})
	wantError(t, err, abi.ErrTooManyRequests, "http: request 4 refused: "+where+" allows 3 requests per task (http.max_requests; redirects count)")

	// Redirect hops count: one call that is redirected twice is three requests.
	s2 := p.NewSession(where, nil)
	defer s2.Close()
	_, err = s2.Do(context.Background(), Request{URL: srv.URL + "/redirect?to=/redirect%3Fto%3D/redirect%253Fto%253D/hello"})
	wantError(t, err, abi.ErrTooManyRequests, "request 4 refused")
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	srv := server(t)
	p := policy(t, hostPort(srv))
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{URL: "ftp://" + hostPort(srv) + "/"}, `the URL scheme "ftp" is not supported: use http or https`},
		{Request{URL: "/relative"}, `the URL scheme "" is not supported`},
		{Request{URL: "http:///path"}, "the URL has no host"},
		{Request{URL: "http://user:pw@" + hostPort(srv) + "/"}, "the URL holds credentials (user@host): send them in an Authorization header instead"},
		{Request{URL: "http://[fe80::1%25eth0]/"}, "has a zone"},
		{Request{URL: "http://bücher.example/"}, "punycode"},
		{Request{URL: "http://" + hostPort(srv) + ":x/"}, "the URL is not valid"},
		{Request{URL: "http://" + hostPort(srv) + "/", Method: "GE T"}, "not a valid HTTP method"},
		{Request{URL: "http://" + hostPort(srv) + "/", Method: "CONNECT"}, "CONNECT is not allowed"},
		{Request{URL: srv.URL, Header: []byte("Host: evil.example")}, "header Host is set by the worker"},
		{Request{URL: srv.URL, Header: []byte("transfer-encoding: chunked")}, "header Transfer-Encoding is set by the worker"},
		{Request{URL: srv.URL, Header: []byte("Proxy-Foo: x")}, "header Proxy-Foo is set by the worker"},
		{Request{URL: srv.URL, Header: []byte("X-Ok: 1\nno colon here")}, "header line 2 is not `Name: value`"},
		{Request{URL: srv.URL, Header: []byte("X-Token: s3cret\x00injected")}, "header X-Token has a control character in its value"},
		{Request{URL: srv.URL, Header: []byte("Bad Name: x")}, "header line 1 is not"},
	} {
		_, err := do(t, p, nil, tc.r)
		if err == nil || err.Code != abi.ErrBadRequest || !strings.Contains(err.Message, tc.want) {
			t.Errorf("%+v: %v, want bad_request %q", tc.r, err, tc.want)
		}
		if err != nil && strings.Contains(err.Message, "s3cret") {
			t.Errorf("message %q repeats a header value", err.Message)
		}
	}
}

// Messages never carry what handlers put secrets in: a URL's path and query, header values.
func TestMessagesLeaveOutSecrets(t *testing.T) {
	t.Parallel()
	srv := server(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	p := policy(t, hostPort(srv), strings.TrimPrefix(closedURL, "http://"))
	p.MaxResponseBytes = 10
	for _, url := range []string{
		"http://evil.example/p/SECRET?key=SECRET",
		closedURL + "/SECRET?key=SECRET",
		srv.URL + "/big?key=SECRET",
		srv.URL + "/redirect?to=http://evil.example/SECRET%3Fkey%3DSECRET",
		"http://SECRET:SECRET@" + hostPort(srv) + "/",
		srv.URL + "/%zzSECRET",
	} {
		_, err := do(t, p, nil, Request{URL: url, Header: []byte("Authorization: Bearer SECRET")})
		if err == nil {
			t.Fatalf("GET %s succeeded", url)
		}
		if strings.Contains(err.Message, "SECRET") {
			t.Errorf("message %q carries a secret", err.Message)
		}
	}
}

func TestDeadlineEndsTheRequest(t *testing.T) {
	t.Parallel()
	srv := server(t)
	obs := &counts{}
	s := policy(t, hostPort(srv)).NewSession(where, obs)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Do(ctx, Request{URL: srv.URL + "/slow"})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the request ran %s past a 200ms deadline", took)
	}
	wantError(t, err, abi.ErrNetwork, "GET "+hostPort(srv)+": the task's deadline passed while waiting for the response")
	if err.Reason != "timeout" || obs.requests[hostPort(srv)+" timeout"] != 1 {
		t.Errorf("reason %q, observed %v", err.Reason, obs.requests)
	}
}

func TestNetworkErrors(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	p := policy(t, strings.TrimPrefix(url, "http://"), "nowhere.test")
	p.Resolver = &fakeResolver{}
	_, err := do(t, p, nil, Request{URL: url})
	wantError(t, err, abi.ErrNetwork, "GET "+strings.TrimPrefix(url, "http://")+" failed: ", "connection refused")
	_, err = do(t, p, nil, Request{URL: "http://nowhere.test/"})
	wantError(t, err, abi.ErrNetwork, "cannot resolve nowhere.test: lookup nowhere.test: no such host")
}

// The environment's proxy settings are ignored: a proxy would connect wherever it likes.
func TestIgnoresProxyEnvironment(t *testing.T) {
	var proxied atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied.Add(1) }))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	srv := server(t)
	resp, err := do(t, policy(t, hostPort(srv)), nil, Request{URL: srv.URL + "/hello"})
	if err != nil || resp.Status != 200 || proxied.Load() != 0 {
		t.Fatalf("%+v %v, proxied %d", resp, err, proxied.Load())
	}
}
