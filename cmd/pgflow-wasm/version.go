package main

import (
	"runtime/debug"
	"strings"
)

// version describes this build: the module version, or for a build from a checkout
// "devel" with the commit (and "+dirty" when it had uncommitted changes).
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	v = "devel-" + rev[:min(12, len(rev))]
	if modified == "true" {
		v += "+dirty"
	}
	return strings.TrimSpace(v)
}
