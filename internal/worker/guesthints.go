package worker

import "strings"

// guestHints explain failure messages that a language writes in its own words when a
// handler tried what the sandbox does not offer (files, sockets), so whoever reads the
// run's error learns why at once instead of decoding "errno 76".
var guestHints = []struct {
	says []string
	hint string
}{
	{[]string{"errno 76", "os error 76", "Capabilities insufficient", "failed to find a pre-opened file descriptor"},
		"a handler has no file system: it gets its data in its input (docs/sandbox.md explains WASI errno values)"},
	{[]string{"operation not supported on this platform"},
		"a handler has no file system or sockets: Rust's std::fs and std::net cannot work in it; HTTP goes through pgflow::http (docs/sandbox.md)"},
	{[]string{": Bad file number", "errno 8)"},
		"a handler has no file system or sockets (docs/sandbox.md explains WASI errno values)"},
}

// withGuestHint appends the hint for a known message, once.
func withGuestHint(msg string) string {
	for _, h := range guestHints {
		for _, s := range h.says {
			if strings.Contains(msg, s) {
				return msg + " (pgflow-wasm: " + h.hint + ")"
			}
		}
	}
	return msg
}
