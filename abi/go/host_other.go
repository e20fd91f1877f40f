//go:build !wasip1

package pgflow

import "sync"

// Off wasm (native builds: go test, tools) the host functions are those of the test host
// (testhost.go). Outside TestHost.Call every capability is denied and log lines are dropped.

// active is the test host of the Call in progress, nil outside one.
var (
	activeMu sync.Mutex
	active   *TestHost
)

func withActive(f func(h *TestHost)) {
	activeMu.Lock()
	h := active
	activeMu.Unlock()
	if h != nil {
		f(h)
	}
}

// Log writes one log line for the current task (in a test: TestHost records it).
func Log(level Level, message string) {
	withActive(func(h *TestHost) { h.logs = append(h.logs, LogLine{Level: level, Message: message}) })
}

func hostHTTPRequest(method, url, header string, body []byte) int32 {
	status, msg := ErrDenied, notHosted
	withActive(func(h *TestHost) { status, msg = h.request(method, url, header, body) })
	setLastError(msg)
	return status
}

func hostResponsePart(part int32) []byte {
	var b []byte
	withActive(func(h *TestHost) {
		if h.response == nil {
			return
		}
		if part == 0 {
			b = []byte(headerText(h.response.Header))
		} else {
			b = append([]byte(nil), h.response.Body...)
		}
	})
	return b
}

func hostConfigGet(name string) ([]byte, int32) {
	var value []byte
	code, msg := ErrDenied, notHosted
	withActive(func(h *TestHost) { value, code, msg = h.config(name) })
	setLastError(msg)
	return value, code
}

func hostSQLQuery(request string) int32 {
	code, msg := ErrDenied, notHosted
	withActive(func(h *TestHost) { code, msg = h.sql(request) })
	setLastError(msg)
	return code
}

func hostSQLResult(n int32) []byte {
	var b []byte
	withActive(func(h *TestHost) { b = append([]byte(nil), h.sqlResult...) })
	return b
}

// lastErr is the message of the last capability call that failed, as the host keeps it.
var lastErr string

func setLastError(msg string) { lastErr = msg }

func hostLastError() string { return lastErr }
