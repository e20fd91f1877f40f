package worker

import (
	"strings"
	"testing"
)

func TestGuestHintsExplainWhatLanguagesSay(t *testing.T) {
	for msg, want := range map[string]string{
		// What C, TinyGo, Rust and Go handlers printed when opening a file in the sandbox.
		"handler_error: fopen(/etc/hostname): errno 76 (Capabilities insufficient)":                           "no file system",
		"handler_error: ReadFile: open /etc/hostname: errno 76":                                               "no file system",
		`handler_error: failed to find a pre-opened file descriptor through which "data.txt" could be opened`: "no file system",
		"handler_error: TcpStream::connect: operation not supported on this platform":                         "std::net",
		"handler_error: ReadFile: open /etc/hostname: Bad file number":                                        "no file system or sockets",
		"handler_error: input.run.name must be a string":                                                      "",
		"Task timed out after 10s": "",
	} {
		got := withGuestHint(msg)
		switch {
		case want == "" && got != msg:
			t.Errorf("%q got a hint: %q", msg, got)
		case want != "" && (!strings.HasPrefix(got, msg+" (pgflow-wasm: ") || !strings.Contains(got, want)):
			t.Errorf("%q: %q, want a hint with %q", msg, got, want)
		}
	}
}
