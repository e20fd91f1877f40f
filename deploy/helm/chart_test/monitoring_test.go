package chart_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

var monitoringValues = map[string]any{
	"database":         map[string]any{"existingSecret": "pgflow-db"},
	"serviceMonitor":   map[string]any{"enabled": true},
	"prometheusRule":   map[string]any{"enabled": true, "queueAgeSeconds": 120, "failureRatio": 0.25, "labels": map[string]any{"release": "kps"}},
	"grafanaDashboard": map[string]any{"enabled": true},
}

// TestChartRendersTheAlertsAndTheDashboard: with prometheusRule and grafanaDashboard on, the
// chart lints and renders a PrometheusRule whose groups are files/alerts.yaml (the file
// ../../alerts_test.go checks with promtool) with the release's job and the values'
// thresholds, and a ConfigMap carrying files/grafana-dashboard.json for Grafana's sidecar.
func TestChartRendersTheAlertsAndTheDashboard(t *testing.T) {
	linter := lint.AllWithKubeVersion(chartDir, deepCopy(monitoringValues).(map[string]any), "jobs",
		&chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"})
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
	manifest, err := render(t, monitoringValues)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r := decodeAll(t, manifest)
	pr := r.prometheusRule
	if pr == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	if pr.Labels["release"] != "kps" {
		t.Errorf("PrometheusRule labels %v, want the values' release=kps", pr.Labels)
	}
	raw, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	job := r.services[0].Name
	want := strings.NewReplacer("__JOB__", job, "__QUEUE_AGE_SECONDS__", "120", "__FAILURE_RATIO__", "0.25").Replace(string(raw))
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict([]byte(want), &spec); err != nil {
		t.Fatalf("files/alerts.yaml: %v", err)
	}
	got, _ := yaml.Marshal(pr.Spec)
	if exp, _ := yaml.Marshal(spec); string(got) != string(exp) {
		t.Errorf("PrometheusRule spec:\n%s\nwant files/alerts.yaml's:\n%s", got, exp)
	}
	if strings.Contains(string(got), "__") {
		t.Errorf("a placeholder is left in the rules:\n%s", got)
	}
	if r.serviceMonitor == nil || !strings.Contains(string(got), `job="work-pgflow-wasm-metrics"`) {
		t.Errorf("the rules select job %q; want the Service the ServiceMonitor scrapes (its job)", job)
	}
	dash, err := os.ReadFile(filepath.Join(chartDir, "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cm := range r.configMaps {
		if body, ok := cm.Data["pgflow-wasm.json"]; ok {
			found = true
			if body != strings.TrimRight(string(dash), "\n") || cm.Labels["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap %s: labels %v, body equal to the file: %v", cm.Name, cm.Labels, body == string(dash))
			}
		}
	}
	if !found {
		t.Error("no ConfigMap carries the dashboard")
	}
}

// Where KEDA may scale the workers to zero, no worker is the idle state: the chart leaves out
// PgflowWasmNoWorker and keeps the other rules; with a floor of one worker it keeps it.
func TestScaleToZeroLeavesOutTheNoWorkerAlert(t *testing.T) {
	for minReplicas, want := range map[int]bool{0: false, 1: true} {
		values := deepCopy(monitoringValues).(map[string]any)
		values["keda"] = map[string]any{"enabled": true, "queues": []any{"orders"}, "minReplicas": minReplicas}
		manifest, err := render(t, values)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		pr := decodeAll(t, manifest).prometheusRule
		var alerts []string
		for _, r := range pr.Spec.Groups[0].Rules {
			alerts = append(alerts, r.Alert)
		}
		if has := slices.Contains(alerts, "PgflowWasmNoWorker"); has != want || len(alerts) < 5 {
			t.Errorf("minReplicas %d: alerts %v, want PgflowWasmNoWorker %v and the 5 others", minReplicas, alerts, want)
		}
	}
}

// TestChartRefusesBadAlertThresholds: a threshold that is not a number fails at render time,
// naming the value, instead of a rule Prometheus refuses.
func TestChartRefusesBadAlertThresholds(t *testing.T) {
	for name, c := range map[string]struct {
		rule map[string]any
		want string
	}{
		"age with a unit": {map[string]any{"enabled": true, "queueAgeSeconds": "5m"}, "prometheusRule.queueAgeSeconds"},
		"ratio above 1":   {map[string]any{"enabled": true, "failureRatio": 5}, "prometheusRule.failureRatio"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, map[string]any{"database": map[string]any{"existingSecret": "x"}, "prometheusRule": c.rule})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("render: %v, want an error naming %s", err, c.want)
			}
		})
	}
}
