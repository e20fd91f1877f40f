package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// validate loads every module and reports each rejected one, not just the first.
func TestValidateReportsEveryRejectedModule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flows := filepath.Join(dir, "flows.yaml")
	text := fmt.Sprintf(`flows:
  - slug: one
    steps:
      - slug: fine
        module: %s
      - slug: abort
        depends_on: [fine]
        module: %s
  - slug: two
    steps:
      - slug: js
        module: %s
`, abs(t, sandboxTestModule(t, "echo")), abs(t, sandboxTestModule(t, "unknown_import")), abs(t, sandboxTestModule(t, "forbidden_imports")))
	if err := os.WriteFile(flows, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "validate", "--cache-dir", "", "--flows", flows)
	if inspectExit(err) != 2 {
		t.Fatalf("exit %d (%v), want 2\n%s", inspectExit(err), err, out)
	}
	for _, want := range []string{
		flows + `:8: flow "one" step "abort": invalid_module: import env.abort is not allowed`,
		flows + `:12: flow "two" step "js": invalid_module: 4 imports are refused`,
		"env.seed (AssemblyScript's Math.random",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "2 of 3 steps have a module wazero refuses") {
		t.Errorf("summary: %q", msg)
	}
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestModuleInspectOfAnUnreadableFilePrintsOnlyTheError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"missing.wasm"}, {"--json", "missing.wasm"}, {t.TempDir()}} {
		out, err := runCLI(t, append([]string{"module", "inspect", "--cache-dir", ""}, args...)...)
		if inspectExit(err) != 2 || out != "" {
			t.Errorf("%v: exit %d, output %q", args, inspectExit(err), out)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "module inspect: ") || strings.Contains(msg, "invalid_module") ||
			!(strings.Contains(msg, "no such file") || strings.Contains(msg, "is a directory")) {
			t.Errorf("%v: error %q", args, msg)
		}
	}
}

func TestJSONLogsWriteDurationsAsText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	app := &cli.App{Flags: logFlags(), Action: func(c *cli.Context) error {
		log, err := newLogger(c, &buf)
		if err != nil {
			return err
		}
		log.Info("task completed", "took", 1500*time.Millisecond, "duration", 250*time.Microsecond, "count", 3)
		return nil
	}}
	cliMu.Lock() // urfave/cli's global help flag: see runCLI
	err := app.RunContext(context.Background(), []string{"x", "--log-format", "json"})
	cliMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if line := buf.String(); !strings.Contains(line, `"took":"1.5s"`) || !strings.Contains(line, `"duration":"250µs"`) || !strings.Contains(line, `"count":3`) {
		t.Errorf("log line: %s", line)
	}
}

// Every command's --help, read as a stranger would: flag placeholders are single words
// (a backquoted phrase in a usage text becomes the placeholder: "--migrations npm ci"),
// defaults are said once, and no "help, h" command is listed under a group.
func TestHelpTextsReadRight(t *testing.T) {
	var visit func(path []string, cmds []*cli.Command)
	flagLine := regexp.MustCompile(`^\s+(--[a-z-]+(?:, -[a-z])?)(?: ([^ ]+(?: [^ ]+)*?))?(?: \[ .*? \])?\s{2,}(.*)$`)
	check := func(path []string) {
		out, err := runCLI(t, append(path, "--help")...)
		if err != nil {
			t.Errorf("%v --help: %v", path, err)
			return
		}
		inOptions := false
		for _, l := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(l, "OPTIONS:"), strings.HasPrefix(l, "GLOBAL OPTIONS:"):
				inOptions = true
				continue
			case strings.TrimSpace(l) == "help, h  Shows a list of commands or help for one command":
				t.Errorf("%v --help lists the help command", path)
			}
			if !inOptions || strings.TrimSpace(l) == "" {
				continue
			}
			if m := flagLine.FindStringSubmatch(l); m != nil && strings.Contains(m[2], " ") {
				t.Errorf("%v --help: the placeholder of %s is %q:\n%s", path, m[1], m[2], l)
			}
			if strings.Count(l, "(default") > 1 {
				t.Errorf("%v --help says a default twice:\n%s", path, l)
			}
		}
	}
	visit = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			p := append(append([]string{}, path...), c.Name)
			check(p)
			visit(p, c.Subcommands)
		}
	}
	check(nil)
	visit(nil, newApp().Commands)
}
