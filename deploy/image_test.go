// Package deploy holds the tests of what ships beside the binary: the container image
// (make image), the systemd unit and the KEDA query of the Helm chart. The chart's own
// tests are a module of their own (helm/chart_test), so this module does not inherit
// Helm's and Kubernetes' dependencies.
package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/localpg"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/workertest"
)

// ImageArchiveEnv names the image archive to test; default: make image's.
const ImageArchiveEnv = "PGFLOW_WASM_IMAGE_ARCHIVE"

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := localpg.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// podman runs podman with args and returns its combined output.
func podman(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// podmanSetup is how this machine runs a container: options before `run` (the runtime)
// and options of `run` (limits, network).
type podmanSetup struct{ global, run []string }

// command is podman's arguments for `run OPTS... rest...`.
func (p podmanSetup) command(rest ...string) []string {
	args := append(append([]string{}, p.global...), "run")
	return append(append(args, p.run...), rest...)
}

// findSetup finds how this machine runs a container, or says why it cannot. Sandboxed
// machines often lack CAP_SYS_RESOURCE (podman's default rlimits are above the host's) or
// mix cgroup versions (crun refuses): the host's own limits and runc get past both.
func findSetup(ctx context.Context, image string) (podmanSetup, error) {
	var nofile, nproc syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	_ = syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc)
	run := []string{"--network=host",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", min(nofile.Cur, 65536), min(nofile.Cur, 65536)),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", min(nproc.Cur, 4096), min(nproc.Cur, 4096))}
	var why []string
	for _, global := range [][]string{nil, {"--runtime", "runc"}} {
		p := podmanSetup{global: global, run: run}
		out, err := podman(ctx, p.command("--rm", image, "--version")...)
		if err == nil && strings.HasPrefix(out, "pgflow-wasm ") {
			return p, nil
		}
		why = append(why, fmt.Sprintf("podman %s: %s", strings.Join(p.command(), " "), out))
	}
	return podmanSetup{}, fmt.Errorf("podman cannot run a container here: %s", strings.Join(why, "; "))
}

// imageName is NAME:TAG as `make image` names the image.
func imageName(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", root, "image-name").Output()
	if err != nil {
		t.Fatalf("make image-name: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestImageServesAFlow starts the image of `make image` with podman against a test database
// and runs a flow with a map step through it; SIGTERM (podman stop) drains and exits 0.
func TestImageServesAFlow(t *testing.T) {
	root := repoRoot(t)
	archive := os.Getenv(ImageArchiveEnv)
	if archive == "" {
		archive = filepath.Join(root, "dist", "pgflow-wasm-image.tar")
	}
	if _, err := os.Stat(archive); err != nil {
		t.Skipf("no image archive at %s: `make image` builds it (`make test-image` builds it and runs this test)", archive)
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed (apt-get install podman): the image cannot be run here")
	}
	modules := filepath.Join(root, "modules", "testdata")
	for _, m := range []string{"echo.wasm", "echo_map.wasm"} {
		if _, err := os.Stat(filepath.Join(modules, m)); err != nil {
			t.Fatalf("%s: build the test modules with `make modules`", m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	out, err := podman(ctx, "load", "-q", "-i", archive)
	if err != nil {
		t.Fatalf("podman load: %v: %s", err, out)
	}
	m := regexp.MustCompile(`Loaded image(?:\(s\))?: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("podman load said %q: no image name", out)
	}
	// Named as the chart pulls it (`make image-name`, which the chart's test compares with
	// the chart), not after the build.
	if want := "localhost/" + imageName(t, root); m[1] != want {
		t.Errorf("podman loaded the image as %s, want %s", m[1], want)
	}
	// The image by its id: another checkout's build may load under the same name meanwhile.
	image, err := podman(ctx, "image", "inspect", "--format", "{{.Id}}", m[1])
	if err != nil {
		t.Fatalf("podman image inspect %s: %v: %s", m[1], err, image)
	}
	// Each build loads a new image: drop it, or the storage grows with every test run.
	t.Cleanup(func() { _, _ = podman(context.Background(), "rmi", "-f", image) })
	setup, err := findSetup(ctx, image)
	if err != nil {
		t.Skip(err)
	}

	// A flows folder as a user would mount it: readable by the image's non-root user.
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "modules"), 0o755))
	for _, m := range []string{"echo.wasm", "echo_map.wasm"} {
		b, err := os.ReadFile(filepath.Join(modules, m))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, "modules", m), b, 0o644))
	}
	must(t, os.WriteFile(filepath.Join(dir, "flows.yaml"), []byte(`flows:
  - slug: image_flow
    steps:
      - slug: items
        module: modules/echo.wasm
      - slug: each
        type: map
        depends_on: [items]
        module: modules/echo_map.wasm
`), 0o644))

	db := pgtest.NewDB(t)
	metrics := freeAddr(t)
	name := fmt.Sprintf("pgflow-wasm-test-%d", os.Getpid())
	args := setup.command("-d", "--name", name, "-v", dir+":/flows:ro", "-e", "DATABASE_URL="+db.URL,
		"-e", "PGFLOW_WASM_METRICS_ADDR="+metrics, image, "serve", "--signal", "notify", "--drain-timeout", "10s")
	if out, err := podman(ctx, args...); err != nil {
		t.Fatalf("podman run: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = podman(context.Background(), "rm", "-f", name) })
	logs := func() string { out, _ := podman(context.Background(), "logs", name); return out }

	db.WaitServing(t, "image_flow")
	run, err := workertest.Store(t, db.Pool).StartAndWait(ctx, "image_flow", json.RawMessage(`{"value": [1, "two", {"three": 3}]}`), time.Second)
	if err != nil {
		t.Fatalf("run: %v\ncontainer logs:\n%s", err, logs())
	}
	if run.Status != "completed" {
		t.Fatalf("run %s: %s (%s)\ncontainer logs:\n%s", run.ID, run.Status, run.Error, logs())
	}
	var output map[string]json.RawMessage
	must(t, json.Unmarshal(run.Output, &output))
	if got := strings.Join(strings.Fields(string(output["each"])), ""); got != `[1,"two",{"three":3}]` {
		t.Errorf("output of the map step: %s", output["each"])
	}

	// Probes and build info answer on the metrics address, from the host's network.
	for path, want := range map[string]string{"/livez": "ok", "/readyz": "ok", "/metrics": "pgflow_wasm_build_info{"} {
		body := get(t, "http://"+metrics+path)
		if !strings.Contains(body, want) {
			t.Errorf("%s: %q lacks %q", path, body, want)
		}
	}

	// podman stop sends the image's stop signal (SIGTERM): the worker drains and exits 0.
	if out, err := podman(ctx, "stop", "-t", "30", name); err != nil {
		t.Fatalf("podman stop: %v: %s", err, out)
	}
	code, err := podman(ctx, "inspect", "--format", "{{.State.ExitCode}}", name)
	if err != nil || code != "0" {
		t.Errorf("exit code after SIGTERM: %q (%v)\ncontainer logs:\n%s", code, err, logs())
	}
	if l := logs(); !strings.Contains(l, "draining") {
		t.Errorf("no drain in the logs after SIGTERM:\n%s", l)
	}
	if size, err := podman(ctx, "image", "inspect", "--format", "{{.Size}}", image); err == nil {
		t.Logf("image %s: %s bytes unpacked", image, size)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
