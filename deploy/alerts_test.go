package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
)

// The chart's monitoring files.
func chartFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "helm", "pgflow-wasm", "files", name))
	must(t, err)
	return b
}

// alertRules is files/alerts.yaml as templates/prometheusrule.yaml renders it: the job and
// the thresholds in place of their placeholders.
func alertRules(t *testing.T, job, queueAge, failureRatio string) string {
	t.Helper()
	r := strings.NewReplacer("__JOB__", job, "__QUEUE_AGE_SECONDS__", queueAge, "__FAILURE_RATIO__", failureRatio)
	return r.Replace(string(chartFile(t, "alerts.yaml")))
}

// promtool runs promtool with args in dir; the test fails with its output when it does.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatal("promtool is not installed: `make deps` installs it (Debian package prometheus, mk/promtool.mk)")
	}
	cmd := exec.Command("promtool", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
}

// TestAlertRulesPassPromtoolWithTheChartDefaults checks files/alerts.yaml, rendered with
// values.yaml's thresholds, with promtool: every expression parses, every rule is well formed.
func TestAlertRulesPassPromtoolWithTheChartDefaults(t *testing.T) {
	var values struct {
		PrometheusRule struct {
			QueueAgeSeconds float64 `yaml:"queueAgeSeconds"`
			FailureRatio    float64 `yaml:"failureRatio"`
		} `yaml:"prometheusRule"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "helm", "pgflow-wasm", "values.yaml"))
	must(t, err)
	must(t, yaml.Unmarshal(b, &values))
	if values.PrometheusRule.QueueAgeSeconds <= 0 || values.PrometheusRule.FailureRatio <= 0 {
		t.Fatalf("values.yaml prometheusRule = %+v, want both thresholds set", values.PrometheusRule)
	}
	dir := t.TempDir()
	writeFile(t, dir, "alerts.yaml", alertRules(t, "pgflow-wasm",
		strconv.FormatFloat(values.PrometheusRule.QueueAgeSeconds, 'f', -1, 64), strconv.FormatFloat(values.PrometheusRule.FailureRatio, 'f', -1, 64)))
	out := promtool(t, dir, "check", "rules", "alerts.yaml")
	if !strings.Contains(out, "SUCCESS: 6 rules found") {
		t.Errorf("promtool check rules: %s, want 6 rules", out)
	}
}

// scrape is one GET of a worker's /metrics, in the text format.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s\n%s", resp.Status, b)
	}
	return string(b)
}

// sample is one series of a scrape and its value.
type sample struct {
	series string // name{labels} with the target's job and instance, as Prometheus stores it
	value  float64
}

var seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)

// samples reads a scrape as Prometheus would store it: each series gets the scrape target's
// job and instance labels, and the target gets up = 1.
func samples(t *testing.T, text, job, instance string) []sample {
	t.Helper()
	target := fmt.Sprintf(`job=%q,instance=%q`, job, instance)
	out := []sample{{series: "up{" + target + "}", value: 1}}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := seriesLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("scrape line %q is not a sample", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("scrape line %q: %v", line, err)
		}
		labels := target
		if m[2] != "" {
			labels += "," + m[2]
		}
		out = append(out, sample{series: m[1] + "{" + labels + "}", value: v})
	}
	return out
}

// promtoolTest is a `promtool test rules` file: the rules evaluated over the scraped samples,
// each held constant for 10 minutes, as a Prometheus scraping that worker once a minute
// would store them; the alert expected (or none) 5 minutes in.
func promtoolTest(rulesFile string, scraped []sample, alert string, want []map[string]any) string {
	var series []map[string]string
	for _, s := range scraped {
		v := strconv.FormatFloat(s.value, 'g', -1, 64)
		series = append(series, map[string]string{"series": s.series, "values": v + "+0x10"})
	}
	doc := map[string]any{
		"rule_files":          []string{rulesFile},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":     "1m",
			"input_series": series,
			"alert_rule_test": []any{map[string]any{
				"eval_time":  "5m",
				"alertname":  alert,
				"exp_alerts": want,
			}},
		}},
	}
	b, _ := yaml.Marshal(doc)
	return string(b)
}

// TestQueueAgeAlertFiresOnAWorkersRealMetrics serves a flow on one handler slot whose first
// task never ends, so the next run's message waits in the queue. The worker's /metrics,
// scraped over HTTP, is fed to `promtool test rules` with the chart's alert rules (an 8 s
// age threshold in place of the chart's): scraped while the message is fresh, the
// queue-age alert stays silent; scraped once the message is older than the threshold, it
// fires for that queue and no other.
func TestQueueAgeAlertFiresOnAWorkersRealMetrics(t *testing.T) {
	db := pgtest.NewDB(t)
	f := workertest.FlowsFile(t, `
flows:
  - slug: busy
    timeout: 60
    steps:
      - {slug: s, module: "{{spin}}"}
  - slug: idle
    steps:
      - {slug: s, module: "{{echo}}"}
`, map[string]string{"spin": "modules/testdata/spin.wasm", "echo": "modules/testdata/echo.wasm"})
	eng := workertest.Engine(t, "wazero")
	m := telemetry.NewMetrics(nil, eng.Abandoned)
	srv, err := telemetry.Listen("127.0.0.1:0", m, &telemetry.Health{})
	must(t, err)
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	workertest.StartWorker(t, db.Pool, f, worker.Config{Engine: eng, Metrics: m, Concurrency: 1, DrainTimeout: time.Second})

	const job, threshold = "pgflow-wasm", 8.0
	dir := t.TempDir()
	writeFile(t, dir, "alerts.yaml", alertRules(t, job, strconv.FormatFloat(threshold, 'f', -1, 64), "0.1"))

	workertest.StartRun(t, db.Pool, "busy", `{}`)
	// The first run's task holds the one slot (tasks in flight 1); the second run waits.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(scrape(t, srv.Addr()), `pgflow_wasm_tasks_in_flight{flow="busy"} 1`) {
		if time.Now().After(deadline) {
			t.Fatal("the first task did not start within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	workertest.StartRun(t, db.Pool, "busy", `{}`)
	age := func(text string) float64 {
		for _, s := range samples(t, text, job, srv.Addr()) {
			if strings.HasPrefix(s.series, "pgflow_wasm_queue_oldest_message_age_seconds{") && strings.Contains(s.series, `queue="busy"`) {
				return s.value
			}
		}
		return -1
	}
	// The gauges are read at most every 5 s: the first scrape that shows the waiting message
	// shows it younger than that, below the threshold.
	var fresh string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		fresh = scrape(t, srv.Addr())
		if strings.Contains(fresh, `pgflow_wasm_queue_visible_messages{queue="busy"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second run's message never showed as visible\n%s", fresh)
		}
	}
	if a := age(fresh); a < 0 || a >= threshold {
		t.Fatalf("first scrape with the message: its age %v s, want a fresh message (0 to %v s)\n%s", a, threshold, fresh)
	}
	var old string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		old = scrape(t, srv.Addr())
		if age(old) > threshold {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiting message's age never passed %v s in 60 s\n%s", threshold, old)
		}
	}
	if !strings.Contains(old, `pgflow_wasm_queue_visible_messages{queue="busy"} 1`) ||
		!strings.Contains(old, `pgflow_wasm_queue_visible_messages{queue="idle"} 0`) {
		t.Errorf("visible messages: want busy 1 and idle 0\n%s", old)
	}

	writeFile(t, dir, "fresh_test.yaml", promtoolTest("alerts.yaml", samples(t, fresh, job, srv.Addr()), "PgflowWasmQueueBacklogOld", nil))
	promtool(t, dir, "test", "rules", "fresh_test.yaml")
	firing := []map[string]any{{
		"exp_labels": map[string]string{"queue": "busy", "severity": "warning"},
		"exp_annotations": map[string]string{
			"summary": "Queue busy: a task has waited longer than 8 s",
			"description": "The oldest visible message of queue busy is older than 8 s: the workers do not keep up " +
				"(all slots busy, a flow drained, workers down).",
		},
	}}
	writeFile(t, dir, "old_test.yaml", promtoolTest("alerts.yaml", samples(t, old, job, srv.Addr()), "PgflowWasmQueueBacklogOld", firing))
	out := promtool(t, dir, "test", "rules", "old_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: %s", out)
	}
}

// dashboard is files/grafana-dashboard.json as far as the test reads it.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestGrafanaDashboardQueriesParseAndNameExportedMetrics decodes the chart's dashboard and
// checks every panel's query: promtool parses it (each as a recording rule), and every
// metric it names is one the worker exports (or Prometheus' own up).
func TestGrafanaDashboardQueriesParseAndNameExportedMetrics(t *testing.T) {
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(chartFile(t, "grafana-dashboard.json"))))
	must(t, dec.Decode(&d))
	if d.Title == "" || len(d.Panels) < 10 {
		t.Fatalf("dashboard %q has %d panels, want a title and the panels docs/operations.md lists", d.Title, len(d.Panels))
	}
	exported := telemetry.NewMetrics(nil, func() int { return 0 }).Names()
	exported = append(exported, "up")
	// Grafana's variables, as it would fill them in.
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", "pgflow-wasm")
	names := regexp.MustCompile(`\b[a-z_][a-z0-9_]*\b\s*[{\[(]?`)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			expr := vars.Replace(tg.Expr)
			n++
			q, _ := json.Marshal(expr)
			fmt.Fprintf(&rules, "      - record: panel_%d\n        expr: %s\n", n, q)
			named := 0
			for _, tok := range names.FindAllString(expr, -1) {
				name := strings.TrimRight(tok, " {[(")
				if !strings.HasPrefix(name, "pgflow_wasm_") && name != "up" {
					continue
				}
				named++
				base := name
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suf); ok && slices.Contains(exported, b) {
						base = b
					}
				}
				if !slices.Contains(exported, base) {
					t.Errorf("panel %q: %s is not a metric the worker exports", p.Title, name)
				}
			}
			if named == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, tg.Expr)
			}
		}
	}
	dir := t.TempDir()
	writeFile(t, dir, "dashboard.yaml", rules.String())
	if out := promtool(t, dir, "check", "rules", "dashboard.yaml"); !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", n)) {
		t.Errorf("promtool check rules (the dashboard's queries): %s, want %d", out, n)
	}
}
