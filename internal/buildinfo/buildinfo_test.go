package buildinfo

import (
	"strings"
	"testing"
)

func TestMissingSaysWhatAndHow(t *testing.T) {
	plain := Info{Version: "devel-abc", Engines: []string{"wazero"}}
	m := plain.Missing()
	if len(m) != 2 || !strings.Contains(m[0], "--migrations DIR") || !strings.Contains(m[1], "-tags wasmtime") {
		t.Errorf("a plain go build lacks: %q", m)
	}
	if s := plain.String(); !strings.Contains(s, "this binary lacks:") || !strings.Contains(s, "make build") {
		t.Errorf("--version of a plain build:\n%s", s)
	}
	full := Info{Version: "v1.2.3", Commit: "abc", Engines: []string{"wazero", "wasmtime"}, PgflowSQL: "0.8.1"}
	if m := full.Missing(); m != nil || strings.Contains(full.String(), "lacks") || full.EngineList() != "wazero+wasmtime" {
		t.Errorf("a make build: %q\n%s", m, full)
	}
}

func TestStampedVersionWins(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v9.9.9", "0123abcd"
	in := Get()
	if in.Version != "v9.9.9" || in.Commit != "0123abcd" || !in.Release {
		t.Errorf("Get: %+v", in)
	}
	version, commit = "", ""
	if in := Get(); in.Release || !strings.HasPrefix(in.Version, "devel") {
		t.Errorf("unstamped: %+v", in)
	}
}
