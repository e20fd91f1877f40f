package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// dashboardURL waits for the "dashboard: open URL" line of a JSON log and returns the URL.
func dashboardURL(t *testing.T, logPath string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		f, err := os.Open(logPath)
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var line struct {
					Msg  string `json:"msg"`
					Addr string `json:"addr"`
				}
				if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Msg, "dashboard: open") {
					f.Close()
					return "http://" + line.Addr + "/"
				}
			}
			f.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(logPath)
	t.Fatalf("the dashboard did not start within 60 s:\n%s", b)
	return ""
}

func httpGet(t *testing.T, url, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func echoFlows(t *testing.T) string {
	return writeFile(t, "flows.yaml", "flows:\n  - slug: shown\n    steps:\n      - {slug: s, module: "+module(t, "modules/testdata/echo.wasm")+"}\n")
}

func TestUIRefusesUnsafeSettings(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	empty := writeFile(t, "token", "\n")
	for name, tc := range map[string]struct {
		args  []string
		wants []string
	}{
		"open address without a token":   {[]string{"--ui-addr", "0.0.0.0:0"}, []string{"not a loopback address", "--ui-token"}},
		"all interfaces without a token": {[]string{"--ui-addr", ":0"}, []string{"not a loopback address"}},
		"short token":                    {[]string{"--ui-addr", "0.0.0.0:0", "--ui-token", "abc"}, []string{"at least 16"}},
		"token twice":                    {[]string{"--ui-token", "0123456789abcdef", "--ui-token-file", empty}, []string{"both given"}},
		"empty token file":               {[]string{"--ui-token-file", empty}, []string{"is empty"}},
		"missing token file":             {[]string{"--ui-token-file", "/nonexistent/token"}, []string{"--ui-token-file", "no such file"}},
		"trace URL without a trace":      {[]string{"--trace-url", "https://tempo.example/trace"}, []string{"--trace-url", "{trace_id}"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"ui", "--database-url", db.URL, "--flows", echoFlows(t)}, tc.args...)
			_, stderr, code := runBinary(t, nil, args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range tc.wants {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not mention %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// `ui` with a token on every interface: refused without it, served with it, stopped by
// SIGTERM with exit code 0.
func TestUIServesWithItsTokenAndStopsOnSigterm(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	token := "0123456789abcdef0123456789abcdef"
	logPath := writeFile(t, "ui.log", "")
	logFile, _ := os.OpenFile(logPath, os.O_WRONLY, 0)
	defer logFile.Close()
	cmd := exec.Command(binary, "ui", "--database-url", db.URL, "--ui-addr", "0.0.0.0:0",
		"--ui-token-file", writeFile(t, "token", token+"\n"), "--log-format", "json", "--flows", echoFlows(t))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	url := dashboardURL(t, logPath)
	if code, body := httpGet(t, url+"runs", ""); code != http.StatusUnauthorized || !strings.Contains(body, "Token needed") {
		t.Fatalf("without the token: %d %.200s", code, body)
	}
	if code, body := httpGet(t, url+"runs", token); code != http.StatusOK || !strings.Contains(body, "<title>Runs · pgflow-wasm</title>") {
		t.Fatalf("with the token: %d %.200s", code, body)
	}
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b), token) {
		t.Fatal("the token was written to the log")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ui after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ui did not stop within 30 s of SIGTERM")
	}
}

// serve --ui-addr: the dashboard beside the worker shows the modules it loaded.
func TestServeWithTheDashboard(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	w := startServe(t, db.URL, echoFlows(t), "--ui-addr", "127.0.0.1:0")
	url := dashboardURL(t, w.log)
	db.WaitServing(t, "shown")
	code, body := httpGet(t, url+"flows", "")
	if code != http.StatusOK || !strings.Contains(body, `id="flow-shown"`) || !strings.Contains(body, "ABI") {
		t.Fatalf("flows page: %d\n%.2000s", code, body)
	}
	if strings.Contains(body, "not loaded") {
		t.Error("the flows page does not show the module the worker loaded")
	}
	if code, body := httpGet(t, url+"workers", ""); code != http.StatusOK || !strings.Contains(body, "st-alive") {
		t.Fatalf("workers page: %d\n%.2000s", code, body)
	}
}
