package chart_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
)

// The workers run as a ServiceAccount of the release's own, with no token mounted; with
// serviceAccount.create off they run as the account named (and so does the db install
// hook, which runs before the chart's own account would exist).
func TestTheWorkersRunAsTheirOwnServiceAccount(t *testing.T) {
	manifest, err := render(t, valueSets["defaults"])
	if err != nil {
		t.Fatal(err)
	}
	r := decodeAll(t, manifest)
	sa := r.serviceAccount
	if sa == nil {
		t.Fatal("the defaults render no ServiceAccount")
	}
	if sa.Name != "work-pgflow-wasm" || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount %s, automount %v; want work-pgflow-wasm without a token", sa.Name, sa.AutomountServiceAccountToken)
	}
	pod := r.deployment.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("the pods run as %q (automount %v), want %s without a token", pod.ServiceAccountName, pod.AutomountServiceAccountToken, sa.Name)
	}

	annotated := map[string]any{"database": map[string]any{"existingSecret": "pgflow-db"},
		"serviceAccount": map[string]any{"name": "flows-worker", "annotations": map[string]any{"iam.gke.io/gcp-service-account": "w@p.iam.gserviceaccount.com"}}}
	manifest, err = render(t, annotated)
	if err != nil {
		t.Fatal(err)
	}
	r = decodeAll(t, manifest)
	if r.serviceAccount == nil || r.serviceAccount.Name != "flows-worker" || r.serviceAccount.Annotations["iam.gke.io/gcp-service-account"] == "" ||
		r.deployment.Spec.Template.Spec.ServiceAccountName != "flows-worker" {
		t.Errorf("a named, annotated account: %+v, pods run as %q", r.serviceAccount, r.deployment.Spec.Template.Spec.ServiceAccountName)
	}

	theirs := map[string]any{"database": map[string]any{"existingSecret": "pgflow-db"},
		"serviceAccount": map[string]any{"create": false, "name": "team-account"},
		"migrations":     map[string]any{"enabled": true}}
	manifest, err = render(t, theirs)
	if err != nil {
		t.Fatal(err)
	}
	r = decodeAll(t, manifest)
	if r.serviceAccount != nil || r.deployment.Spec.Template.Spec.ServiceAccountName != "team-account" {
		t.Errorf("serviceAccount.create false: rendered %v, pods run as %q; want none rendered, team-account",
			r.serviceAccount != nil, r.deployment.Spec.Template.Spec.ServiceAccountName)
	}
	var job batchv1.Job
	decodeStrict(t, hooks(t, theirs)["Job"], &job)
	if got := job.Spec.Template.Spec.ServiceAccountName; got != "team-account" {
		t.Errorf("the db install hook runs as %q, want team-account", got)
	}
	var own batchv1.Job
	decodeStrict(t, hooks(t, valueSets["db-install-hook"])["Job"], &own)
	if got := own.Spec.Template.Spec.ServiceAccountName; got != "" {
		t.Errorf("the hook names %q, which the chart creates only after the hook ran", got)
	}
}

// `make image` names the image as the chart pulls it by default.
func TestTheChartPullsTheImageMakeImageTags(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", root, "image-name").Output()
	if err != nil {
		t.Fatalf("make image-name: %v", err)
	}
	built := strings.TrimSpace(string(out))
	manifest, err := render(t, valueSets["defaults"])
	if err != nil {
		t.Fatal(err)
	}
	pulled := decodeAll(t, manifest).deployment.Spec.Template.Spec.Containers[0].Image
	if built != pulled || !strings.HasPrefix(built, "pgflow-wasm:") {
		t.Errorf("make image tags %q, the chart pulls %q", built, pulled)
	}
}
