package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Contender is one way of processing pgflow tasks that the benchmark measures.
type Contender struct {
	Name string // e.g. "floor", "reference", "wazero/c/polling"
	Kind string // KindFloor, KindReference or KindWorker
	// For KindWorker:
	Lang   string // assemblyscript, c, rust, tinygo, go, typescript
	Engine string // wazero or wasmtime
	Signal string // polling or notify
	// Binary and Args let a variant run another build or extra serve flags (before/after
	// comparisons in one run); empty means the benchmark's binary and Config.WorkerArgs.
	Binary string
	Args   []string
	Reuse  bool // the steps reuse instances (reuse_instance: true)
}

// ParseVariant reads a variant contender: "NAME:TOKEN ...", where a token is lang=L,
// engine=E, signal=S, binary=PATH, reuse (steps reuse instances), or a flag passed to
// serve (e.g. --completion-batch=1).
// It defaults to C on wazero with polling.
func ParseVariant(spec string) (Contender, error) {
	name, rest, ok := strings.Cut(spec, ":")
	if !ok || name == "" {
		return Contender{}, fmt.Errorf("variant %q: write NAME:TOKENS, e.g. unbatched:--completion-batch=1", spec)
	}
	c := Contender{Name: name, Kind: KindWorker, Lang: "c", Engine: "wazero", Signal: "polling"}
	for _, tok := range strings.Fields(rest) {
		k, v, _ := strings.Cut(tok, "=")
		switch k {
		case "lang":
			c.Lang = v
		case "engine":
			c.Engine = v
		case "signal":
			c.Signal = v
		case "binary":
			c.Binary = v
		case "reuse":
			c.Reuse = true
		default:
			if !strings.HasPrefix(tok, "-") {
				return Contender{}, fmt.Errorf("variant %q: %q is neither lang=, engine=, signal=, binary=, reuse nor a flag", spec, tok)
			}
			c.Args = append(c.Args, tok)
		}
	}
	return c, nil
}

// Contender kinds.
const (
	KindFloor     = "floor"
	KindReference = "reference"
	KindWorker    = "pgflow-wasm"
)

// Languages whose example modules the benchmark runs, in report order (typescript: the .ts
// examples, which the worker bundles and runs in its JavaScript engine).
var Languages = []string{"assemblyscript", "c", "rust", "tinygo", "go", "typescript"}

// DefaultContenders is the full matrix: the floor, the reference, pgflow-wasm with every
// language under both signals on wazero, and C on wasmtime under both signals.
func DefaultContenders() []Contender {
	out := []Contender{{Name: "floor", Kind: KindFloor}, {Name: "reference", Kind: KindReference}}
	for _, lang := range Languages {
		for _, sig := range []string{"polling", "notify"} {
			out = append(out, Contender{Name: "wazero/" + lang + "/" + sig, Kind: KindWorker, Lang: lang, Engine: "wazero", Signal: sig})
		}
	}
	for _, sig := range []string{"polling", "notify"} {
		out = append(out, Contender{Name: "wasmtime/c/" + sig, Kind: KindWorker, Lang: "c", Engine: "wasmtime", Signal: sig})
	}
	return out
}

// process is a running contender.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan error
}

// launch starts a contender against dbURL serving flow (described by flowsFile for the
// pgflow-wasm worker) and returns once it is ready to take tasks. A pgflow-wasm worker
// writes its task trace to tracePath unless it is "".
func (r *runner) launch(ctx context.Context, c Contender, dbURL, flow, flowsFile, tracePath string) (*process, error) {
	logFile, err := os.CreateTemp(r.tmp, strings.ReplaceAll(c.Name, "/", "-")+"-*.log")
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	readyURL := ""
	switch c.Kind {
	case KindFloor:
		cmd = exec.Command(r.cfg.FloorBinary, "floor", "--database-url", dbURL, "--flow", flow,
			"--loops", fmt.Sprint(r.cfg.FloorLoops), "--batch-size", "10")
	case KindReference:
		// The edge worker's flow-loop defaults: read_with_poll for up to 2 s, every 100 ms.
		cmd = exec.Command("node", filepath.Join(r.cfg.RepoRoot, "internal", "bench", "reference", "worker.mjs"),
			"--database-url", dbURL, "--flow", flow, "--max-poll-seconds", "2", "--poll-interval-ms", "100")
		cmd.Dir = r.cfg.RepoRoot
	case KindWorker:
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		readyURL = "http://" + addr + "/readyz"
		args := []string{"serve", "--flows", flowsFile, "--database-url", dbURL, "--engine", c.Engine, "--signal", c.Signal,
			"--metrics-addr", addr, "--log-level", "warn", "--log-format", "json", "--cache-dir", r.cfg.CacheDir}
		args = append(args, r.cfg.WorkerArgs...)
		args = append(args, c.Args...)
		bin := r.cfg.Binary
		if c.Binary != "" {
			bin = c.Binary
		}
		cmd = exec.Command(bin, args...)
		if tracePath != "" {
			cmd.Env = append(os.Environ(), taskTraceEnv+"="+tracePath)
		}
	default:
		return nil, fmt.Errorf("unknown contender kind %q", c.Kind)
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", c.Name, err)
	}
	p := &process{cmd: cmd, logPath: logFile.Name(), done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		// Forward stdout to the log, noticing the "ready" line of the floor and the reference.
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			if !signalled && strings.HasPrefix(sc.Text(), "ready") {
				close(ready)
				signalled = true
			}
		}
		_, _ = io.Copy(logFile, stdout)
	}()
	go func() { p.done <- cmd.Wait(); logFile.Close() }()

	deadline := time.After(2 * time.Minute)
	for {
		if readyURL != "" {
			if resp, err := http.Get(readyURL); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return p, nil
				}
			}
		}
		select {
		case <-ready:
			return p, nil
		case err := <-p.done:
			return nil, fmt.Errorf("%s exited before it was ready (%v); log: %s", c.Name, err, tailFile(p.logPath))
		case <-deadline:
			p.kill()
			return nil, fmt.Errorf("%s not ready after 2 minutes; log: %s", c.Name, tailFile(p.logPath))
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop asks the process to finish (SIGTERM) and waits; it kills it after 30 s.
func (p *process) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("did not stop within 30 s of SIGTERM")
	}
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// taskTraceEnv is the variable that makes `pgflow-wasm serve` write its task trace
// (cmd/pgflow-wasm/tasktrace.go), one line per written task, read by hopBreakdown.
const taskTraceEnv = "PGFLOW_WASM_TASK_TRACE"
