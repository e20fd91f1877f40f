// Package chart_test renders the Helm chart deploy/helm/pgflow-wasm with the Helm SDK for
// several values sets, lints it, and decodes every rendered manifest strictly into its API
// type (Kubernetes', the Prometheus operator's, KEDA's): a misspelt or misplaced field is
// an error here instead of an object the cluster silently trims. A module of its own, so
// the worker's module does not inherit Helm's and Kubernetes' dependencies.
package chart_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// hooks renders the chart like render and returns its hooks' manifests (Helm keeps them apart
// from the release's manifest) by kind.
func hooks(t *testing.T, values map[string]any) map[string]string {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "work", "jobs"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	rel, err := install.Run(loadChart(t), deepCopy(values).(map[string]any))
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	out := map[string]string{}
	for _, h := range rel.Hooks {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(h.Manifest), &head); err != nil {
			t.Fatal(err)
		}
		out[head.Kind] = h.Manifest
	}
	return out
}

// The db install Job is a hook before installs and upgrades, off by default; it runs the
// image's db install with the migrations folder and the Secret it is given, as locked down
// as the worker.
func TestTheDbInstallJobRunsBeforeAnUpgrade(t *testing.T) {
	if got := hooks(t, valueSets["defaults"]); len(got) != 0 {
		t.Errorf("the defaults render hooks: %v", got)
	}
	doc, ok := hooks(t, valueSets["db-install-hook"])["Job"]
	if !ok {
		t.Fatal("migrations.enabled renders no Job hook")
	}
	var job batchv1.Job
	decodeStrict(t, doc, &job)
	if got := job.Annotations["helm.sh/hook"]; got != "pre-install,pre-upgrade" {
		t.Errorf("helm.sh/hook = %q, want pre-install,pre-upgrade", got)
	}
	if got := job.Annotations["helm.sh/hook-delete-policy"]; !strings.Contains(got, "before-hook-creation") {
		t.Errorf("helm.sh/hook-delete-policy = %q: a failed Job would block the next upgrade", got)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
		t.Fatalf("the Job's pod: restart %s, %d containers", pod.RestartPolicy, len(pod.Containers))
	}
	c := pod.Containers[0]
	if got := strings.Join(c.Args, " "); got != "db install --pgmq=auto --migrations=/migrations" {
		t.Errorf("args = %q", got)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "DATABASE_URL" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.SecretKeyRef == nil ||
		c.Env[0].ValueFrom.SecretKeyRef.Name != "pgflow-owner" || c.Env[0].ValueFrom.SecretKeyRef.Key != "url" {
		t.Errorf("env = %+v, want DATABASE_URL from Secret pgflow-owner key url", c.Env)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.MountPath == "/migrations"
	}
	if !mounted {
		t.Errorf("the migrations ConfigMap is not mounted at /migrations: %+v", c.VolumeMounts)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("the Job's container is not locked down: %+v", sc)
	}
	if p := pod.SecurityContext; p == nil || p.RunAsNonRoot == nil || !*p.RunAsNonRoot {
		t.Errorf("the Job's pod may run as root: %+v", p)
	}
}

const chartDir = "../pgflow-wasm"

// rendered is one values set's manifests, decoded.
type rendered struct {
	deployment      *appsv1.Deployment
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	services        []*corev1.Service
	pdb             *policyv1.PodDisruptionBudget
	serviceMonitor  *monitoringv1.ServiceMonitor
	prometheusRule  *monitoringv1.PrometheusRule
	scaledObject    *kedav1alpha1.ScaledObject
	triggerAuth     *kedav1alpha1.TriggerAuthentication
	serviceAccount  *corev1.ServiceAccount
	kinds           []string
	manifestsByKind map[string]string
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// render runs `helm template` (an install, client only, dry run) with values.
func render(t *testing.T, values map[string]any) (string, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "work", "jobs"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	// Helm merges the chart's defaults into the map it is given: give it a copy.
	rel, err := install.Run(loadChart(t), deepCopy(values).(map[string]any))
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// decodeStrict decodes a YAML manifest into out, refusing unknown and duplicate fields.
func decodeStrict(t *testing.T, doc string, out any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), out); err != nil {
		t.Fatalf("strict decode into %T: %v\n%s", out, err, doc)
	}
}

func decodeAll(t *testing.T, manifest string) rendered {
	t.Helper()
	r := rendered{manifestsByKind: map[string]string{}}
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		r.kinds = append(r.kinds, head.Kind)
		r.manifestsByKind[head.Kind] = doc
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			r.deployment = &appsv1.Deployment{}
			decodeStrict(t, doc, r.deployment)
		case "v1 ConfigMap":
			var cm corev1.ConfigMap
			decodeStrict(t, doc, &cm)
			r.configMaps = append(r.configMaps, &cm)
		case "v1 Secret":
			var s corev1.Secret
			decodeStrict(t, doc, &s)
			r.secrets = append(r.secrets, &s)
		case "v1 Service":
			var s corev1.Service
			decodeStrict(t, doc, &s)
			r.services = append(r.services, &s)
		case "v1 ServiceAccount":
			r.serviceAccount = &corev1.ServiceAccount{}
			decodeStrict(t, doc, r.serviceAccount)
		case "policy/v1 PodDisruptionBudget":
			r.pdb = &policyv1.PodDisruptionBudget{}
			decodeStrict(t, doc, r.pdb)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.serviceMonitor = &monitoringv1.ServiceMonitor{}
			decodeStrict(t, doc, r.serviceMonitor)
		case "monitoring.coreos.com/v1 PrometheusRule":
			r.prometheusRule = &monitoringv1.PrometheusRule{}
			decodeStrict(t, doc, r.prometheusRule)
		case "keda.sh/v1alpha1 ScaledObject":
			r.scaledObject = &kedav1alpha1.ScaledObject{}
			decodeStrict(t, doc, r.scaledObject)
		case "keda.sh/v1alpha1 TriggerAuthentication":
			r.triggerAuth = &kedav1alpha1.TriggerAuthentication{}
			decodeStrict(t, doc, r.triggerAuth)
		default:
			t.Fatalf("the chart renders %s %s, which this test does not decode", head.APIVersion, head.Kind)
		}
	}
	return r
}

// kedaQuery is the query the chart should render for queues: files/visible-messages.sql
// without comment lines, as ../../keda_test.go builds it to run on PostgreSQL.
func kedaQuery(t *testing.T, queues ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "visible-messages.sql"))
	if err != nil {
		t.Fatal(err)
	}
	sql := regexp.MustCompile(`(?m)^--.*\n`).ReplaceAllString(string(b), "")
	quoted := make([]string, len(queues))
	for i, q := range queues {
		quoted[i] = "'" + q + "'"
	}
	return strings.TrimSpace(strings.ReplaceAll(sql, "__QUEUES__", "ARRAY["+strings.Join(quoted, ",")+"]"))
}

func TestChartLints(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartDir, deepCopy(values).(map[string]any), "jobs", &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"})
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}

var valueSets = map[string]map[string]any{
	// The image carries flows and modules (a FROM); the Secret exists already.
	"defaults": {"database": map[string]any{"existingSecret": "pgflow-db"}},
	// Everything from values; KEDA down to zero; a ServiceMonitor; traces by environment.
	"keda-to-zero": {
		"database":       map[string]any{"url": "postgres://worker:secret@db:5432/app"},
		"flows":          map[string]any{"inline": "flows:\n  - slug: word_totals\n    steps:\n      - slug: count\n        module: modules/count.wasm\n"},
		"modules":        map[string]any{"configMap": "my-modules"},
		"serviceMonitor": map[string]any{"enabled": true},
		"keda":           map[string]any{"enabled": true, "queues": []any{"word_totals", "checkout"}, "minReplicas": 0, "maxReplicas": 6},
		"worker":         map[string]any{"drainTimeoutSeconds": 120},
		"extraEnv":       []any{map[string]any{"name": "OTEL_TRACES_EXPORTER", "value": "otlp"}},
	},
	// db install as a pre-install and pre-upgrade hook, its migrations from a ConfigMap and its
	// URL (an owner's role) from a Secret of its own.
	"db-install-hook": {
		"database":   map[string]any{"existingSecret": "pgflow-db"},
		"migrations": map[string]any{"enabled": true, "configMap": "pgflow-migrations", "existingSecret": "pgflow-owner", "secretKey": "url"},
	},
	// A flows ConfigMap of the user's; KEDA with a floor of one worker; no PDB.
	"keda-min-one": {
		"database":            map[string]any{"existingSecret": "pgflow-db", "secretKey": "url"},
		"flows":               map[string]any{"configMap": "team-flows"},
		"keda":                map[string]any{"enabled": true, "queues": []any{"orders"}},
		"podDisruptionBudget": map[string]any{"enabled": false},
	},
}

func TestChartRendersValidManifests(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			manifest, err := render(t, values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			r := decodeAll(t, manifest)
			checkDeployment(t, r, values)
			checkOthers(t, r, values)
		})
	}
}

func get(values map[string]any, path ...string) any {
	var v any = values
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func checkDeployment(t *testing.T, r rendered, values map[string]any) {
	d := r.deployment
	if d == nil {
		t.Fatal("no Deployment")
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}

	// Probes: /livez for liveness and startup, /readyz for readiness, on the metrics port.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for what, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: %+v, want an HTTP GET", what, probe)
			continue
		}
		want := "/livez"
		if what == "readiness" {
			want = "/readyz"
		}
		if probe.HTTPGet.Path != want {
			t.Errorf("%s probe path %s, want %s", what, probe.HTTPGet.Path, want)
		}
		if _, ok := ports[probe.HTTPGet.Port.StrVal]; !ok {
			t.Errorf("%s probe port %q is no container port (%v)", what, probe.HTTPGet.Port.String(), ports)
		}
	}
	if addr := env["PGFLOW_WASM_METRICS_ADDR"].Value; addr != fmt.Sprintf(":%d", ports["metrics"]) {
		t.Errorf("metrics address %q, container port %d", addr, ports["metrics"])
	}

	// The grace period is above the drain timeout the worker is given.
	drain, err := time.ParseDuration(env["PGFLOW_WASM_DRAIN_TIMEOUT"].Value)
	if err != nil {
		t.Fatalf("PGFLOW_WASM_DRAIN_TIMEOUT: %v", err)
	}
	if want := get(values, "worker", "drainTimeoutSeconds"); want != nil && drain != time.Duration(want.(int))*time.Second {
		t.Errorf("drain timeout %s, values ask %vs", drain, want)
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if grace < drain+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s is not above the drain timeout %s by 10 s: the kubelet's SIGKILL would cut the drain", grace, drain)
	}

	// The database URL is a Secret's, never a literal in the pod spec.
	db := env["DATABASE_URL"]
	if db.Value != "" || db.ValueFrom == nil || db.ValueFrom.SecretKeyRef == nil {
		t.Errorf("DATABASE_URL: %+v, want a secretKeyRef", db)
	} else {
		ref := db.ValueFrom.SecretKeyRef
		if name := get(values, "database", "existingSecret"); name != nil && ref.Name != name {
			t.Errorf("DATABASE_URL from Secret %s, values name %v", ref.Name, name)
		}
		if get(values, "database", "url") != nil {
			if len(r.secrets) != 1 || r.secrets[0].Name != ref.Name || r.secrets[0].StringData[ref.Key] == "" {
				t.Errorf("DATABASE_URL from %s/%s: the chart's Secret does not hold it (%d secrets)", ref.Name, ref.Key, len(r.secrets))
			}
		}
	}

	// Non-root, read-only, resources set.
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("pod does not run as non-root")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem is writable")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v", c.Resources)
	}

	// Flows and modules: from the image, or mounted from the ConfigMaps the values name.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	flowsCM := ""
	if s, _ := get(values, "flows", "configMap").(string); s != "" {
		flowsCM = s
	} else if get(values, "flows", "inline") != nil {
		flowsCM = "work-pgflow-wasm-flows"
		if len(r.configMaps) != 1 || r.configMaps[0].Name != flowsCM || strings.TrimSpace(r.configMaps[0].Data["flows.yaml"]) != strings.TrimSpace(get(values, "flows", "inline").(string)) {
			t.Errorf("inline flows: ConfigMaps %+v", r.configMaps)
		}
	}
	if m, ok := mounts["/flows/flows.yaml"]; flowsCM == "" {
		if ok {
			t.Error("flows.yaml is mounted though the values take it from the image")
		}
	} else if !ok || volumes[m.Name].ConfigMap == nil || volumes[m.Name].ConfigMap.Name != flowsCM {
		t.Errorf("flows.yaml mount %+v, want ConfigMap %s", m, flowsCM)
	}
	if cm, _ := get(values, "modules", "configMap").(string); cm != "" {
		m, ok := mounts["/flows/modules"]
		if !ok || volumes[m.Name].ConfigMap == nil || volumes[m.Name].ConfigMap.Name != cm {
			t.Errorf("modules mount %+v, want ConfigMap %s", m, cm)
		}
	}

	// KEDA owns the replica count when enabled.
	keda := get(values, "keda", "enabled") == true
	if keda != (d.Spec.Replicas == nil) {
		t.Errorf("keda %v, replicas %v: the Deployment and the HPA would fight over the count", keda, d.Spec.Replicas)
	}
	if env["OTEL_TRACES_EXPORTER"].Value != "" && get(values, "extraEnv") == nil {
		t.Error("OTEL_TRACES_EXPORTER set without extraEnv")
	}
}

func checkOthers(t *testing.T, r rendered, values map[string]any) {
	d := r.deployment
	podLabels := d.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if pdbOn := get(values, "podDisruptionBudget", "enabled") != false; pdbOn != (r.pdb != nil) {
		t.Errorf("PodDisruptionBudget: rendered %v, values %v", r.pdb != nil, pdbOn)
	} else if r.pdb != nil && !matches(r.pdb.Spec.Selector.MatchLabels) {
		t.Errorf("PDB selector %v misses the pods %v", r.pdb.Spec.Selector.MatchLabels, podLabels)
	}
	if len(r.services) != 1 || !matches(r.services[0].Spec.Selector) {
		t.Fatalf("metrics Service: %+v", r.services)
	}
	if smOn := get(values, "serviceMonitor", "enabled") == true; smOn != (r.serviceMonitor != nil) {
		t.Errorf("ServiceMonitor: rendered %v, values %v", r.serviceMonitor != nil, smOn)
	} else if sm := r.serviceMonitor; sm != nil {
		if sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %+v", sm.Spec.Endpoints[0])
		}
		for k, v := range sm.Spec.Selector.MatchLabels {
			if r.services[0].Labels[k] != v {
				t.Errorf("ServiceMonitor selects %s=%s; the Service has %v", k, v, r.services[0].Labels)
			}
		}
	}

	kedaOn := get(values, "keda", "enabled") == true
	if kedaOn != (r.scaledObject != nil) || kedaOn != (r.triggerAuth != nil) {
		t.Fatalf("KEDA: ScaledObject %v, TriggerAuthentication %v, values %v", r.scaledObject != nil, r.triggerAuth != nil, kedaOn)
	}
	if !kedaOn {
		return
	}
	so := r.scaledObject
	if so.Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("ScaledObject scales %s, the Deployment is %s", so.Spec.ScaleTargetRef.Name, d.Name)
	}
	wantMin := int32(1)
	if m, ok := get(values, "keda", "minReplicas").(int); ok {
		wantMin = int32(m)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != wantMin {
		t.Errorf("minReplicaCount %v, want %d", so.Spec.MinReplicaCount, wantMin)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "postgresql" {
		t.Fatalf("triggers: %+v", so.Spec.Triggers)
	}
	trig := so.Spec.Triggers[0]
	var queues []string
	for _, q := range get(values, "keda", "queues").([]any) {
		queues = append(queues, q.(string))
	}
	if got, want := trig.Metadata["query"], kedaQuery(t, queues...); got != want {
		t.Errorf("KEDA query:\n%s\nwant (files/visible-messages.sql for %v):\n%s", got, queues, want)
	}
	if trig.Metadata["targetQueryValue"] == "" || trig.Metadata["activationTargetQueryValue"] != "0" {
		t.Errorf("trigger metadata %v", trig.Metadata)
	}
	if trig.AuthenticationRef == nil || trig.AuthenticationRef.Name != r.triggerAuth.Name {
		t.Fatalf("trigger authentication %+v", trig.AuthenticationRef)
	}
	ref := r.triggerAuth.Spec.SecretTargetRef
	dbRef := d.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef
	if len(ref) != 1 || ref[0].Parameter != "connection" || ref[0].Name != dbRef.Name || ref[0].Key != dbRef.Key {
		t.Errorf("KEDA connects with %+v; the worker with Secret %s key %s", ref, dbRef.Name, dbRef.Key)
	}
}

// TestChartRefusesBadValues: mistakes fail at render time, naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	for name, c := range map[string]struct {
		values map[string]any
		want   string
	}{
		"no database": {map[string]any{}, "database: set existingSecret"},
		"keda without queues": {map[string]any{"database": map[string]any{"existingSecret": "x"}, "keda": map[string]any{"enabled": true}},
			"keda.queues"},
		"keda with a bad queue": {map[string]any{"database": map[string]any{"existingSecret": "x"},
			"keda": map[string]any{"enabled": true, "queues": []any{"orders'; drop table x; --"}}}, "is not a pgflow queue name"},
		"a db install hook with only the chart's Secret": {map[string]any{"database": map[string]any{"url": "postgres://db/app"},
			"migrations": map[string]any{"enabled": true}}, "migrations.enabled: name the Secret"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("render: %v, want an error with %q", err, c.want)
			}
		})
	}
}

// The decoding is strict indeed: a misplaced field fails, where a lenient decode (and the
// API server, which drops unknown fields) would let it pass.
func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	doc := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      terminationGracePeriod: 45\n"
	if err := yaml.UnmarshalStrict([]byte(doc), &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), "terminationGracePeriod") {
		t.Errorf("an unknown field decoded: %v", err)
	}
}
