package pgflow

import "strings"

// Capabilities: outbound HTTP and named values, as far as the step's `http` and `env`
// keys in flows.yaml allow (abi/SPEC.md). A call the step may not make returns a *CapError
// whose message names the key to change; it never traps.

// Error codes of HTTP and Config (CapError.Code), as in the ABI.
const (
	ErrDenied           int32 = -1  // the step has no `http` key, or the name is not in its `env` list
	ErrHostNotAllowed   int32 = -2  // the host (or a redirect's) matches no http.allow entry
	ErrAddressRefused   int32 = -3  // a loopback, private, link-local, metadata... address no http.allow entry names
	ErrTooManyRequests  int32 = -4  // over http.max_requests in this task (redirects count)
	ErrResponseTooLarge int32 = -5  // over http.max_response_bytes
	ErrRequestTooLarge  int32 = -6  // over http.max_request_bytes (or headers over 64 KiB)
	ErrBadRequest       int32 = -7  // an invalid method, URL, scheme or header
	ErrNetwork          int32 = -8  // DNS, connection, TLS or protocol failure
	ErrTooManyRedirects int32 = -9  // more than 10 redirects
	ErrNotSet           int32 = -10 // Config: listed in `env` but not set in the worker's environment
)

// notHosted is the message of every capability call in a native (not wasip1) build.
const notHosted = "pgflow: capabilities need a pgflow-wasm host (build with GOOS=wasip1)"

// CapError is a refused or failed capability call; Error returns the host's message.
type CapError struct {
	Code    int32
	Message string
}

func (e *CapError) Error() string { return e.Message }

// Header is one request or response header.
type Header struct{ Name, Value string }

// Response is an HTTP response. An error status (404, 500) is a response like any other.
type Response struct {
	Status int
	Header []Header // names in canonical form (Content-Type), sorted by name
	Body   []byte
}

// Get returns the first value of the named header (any case), or "".
func (r *Response) Get(name string) string {
	for _, h := range r.Header {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

// Get sends a GET request.
func Get(url string) (*Response, error) { return HTTP("GET", url, nil, nil) }

// HTTP sends a request: method, an absolute http(s) URL, headers and a body (nil for
// none). Redirects are followed; each hop must be allowed too.
func HTTP(method, url string, header []Header, body []byte) (*Response, error) {
	status := hostHTTPRequest(method, url, headerText(header), body)
	if status < 0 {
		return nil, capError(status)
	}
	// Assigned before use: Go leaves the order of evaluation in a composite literal of
	// calls with side effects to the compiler, and TinyGo differs.
	headers := parseHeader(string(hostResponsePart(0)))
	respBody := hostResponsePart(1)
	return &Response{Status: int(status), Header: headers, Body: respBody}, nil
}

// Config reads a named value the step may see: a name of its `env` list in flows.yaml,
// with the worker's value.
func Config(name string) (string, error) {
	v, code := hostConfigGet(name)
	if code < 0 {
		return "", capError(code)
	}
	return string(v), nil
}

func capError(code int32) error { return &CapError{Code: code, Message: hostLastError()} }

// headerText writes headers as the ABI's "Name: value\n" lines.
func headerText(hs []Header) string {
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(h.Name)
		b.WriteString(": ")
		b.WriteString(h.Value)
		b.WriteByte('\n')
	}
	return b.String()
}

// parseHeader reads the host's "Name: value\n" lines.
func parseHeader(text string) []Header {
	var out []Header
	for _, line := range strings.Split(text, "\n") {
		if name, value, ok := strings.Cut(line, ": "); ok {
			out = append(out, Header{Name: name, Value: value})
		}
	}
	return out
}
