package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// unitSettings reads a unit file's Key=value lines (Environment= as NAME=value pairs).
func unitSettings(t *testing.T, path string) (map[string][]string, map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	keys, env := map[string][]string{}, map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		keys[k] = append(keys[k], v)
		if k == "Environment" {
			name, val, _ := strings.Cut(v, "=")
			env[name] = val
		}
	}
	must(t, sc.Err())
	return keys, env
}

// TestSystemdUnit checks deploy/systemd/pgflow-wasm.service: systemd-analyze verify accepts
// it, the hardening is there and rated OK by systemd-analyze security, and a SIGTERM's drain
// fits in TimeoutStopSec.
func TestSystemdUnit(t *testing.T) {
	unit := filepath.Join(repoRoot(t), "deploy", "systemd", "pgflow-wasm.service")
	keys, env := unitSettings(t, unit)

	for k, want := range map[string]string{"DynamicUser": "yes", "ProtectSystem": "strict", "NoNewPrivileges": "yes",
		"PrivateTmp": "yes", "ProtectHome": "yes", "KillSignal": "SIGTERM", "CapabilityBoundingSet": ""} {
		if got := keys[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"RestrictAddressFamilies", "SystemCallFilter", "CacheDirectory"} {
		if len(keys[k]) == 0 {
			t.Errorf("no %s=", k)
		}
	}
	drain, err := time.ParseDuration(env["PGFLOW_WASM_DRAIN_TIMEOUT"])
	if err != nil {
		t.Fatalf("PGFLOW_WASM_DRAIN_TIMEOUT: %v", err)
	}
	stop, err := time.ParseDuration(keys["TimeoutStopSec"][0])
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	// The drain, then writing the last outcomes and marking the worker stopped.
	if stop < drain+10*time.Second {
		t.Errorf("TimeoutStopSec %s leaves less than 10 s after the drain timeout %s: systemd would SIGKILL a draining worker", stop, drain)
	}

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the unit was not verified")
	}
	// verify checks that ExecStart's program exists: point it at one that does.
	exe, err := os.Executable()
	must(t, err)
	text, err := os.ReadFile(unit)
	must(t, err)
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "pgflow-wasm.service")
	must(t, os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(text), "/usr/local/bin/pgflow-wasm", exe)), 0o644))
	out, err := exec.Command("systemd-analyze", "verify", copyPath).CombinedOutput()
	if err != nil || strings.Contains(string(out), "pgflow-wasm.service") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", copyPath).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for pgflow-wasm.service: ([0-9.]+) (\w+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security said no exposure level:\n%s", out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: exposure %.1f %s", level, m[2])
	if level > 2.0 {
		t.Errorf("exposure %.1f (%s), above 2.0: a hardening setting went missing\n%s", level, m[2], out)
	}
}
