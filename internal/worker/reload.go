package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/service"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Supervisor serves a flows file with one worker at a time, the top service of the worker's
// lifecycle (package service). While it runs it watches the file and every module it names;
// when one changes (by content: its sha256) or a reload is asked for (SIGHUP), it loads the
// new file and modules and compiles the flows; if all that succeeds, a fresh worker starts
// serving and the old one drains: new tasks use the new modules, tasks already running
// finish on the old ones, new flows and steps are served. A refused change (a file that does
// not parse, a module the sandbox rejects, a flow whose shape differs from the database's)
// is logged with its reason and the running worker goes on. Every reload is logged with each
// module's old and new sha256. When abandoned handler calls make a worker end with
// ErrRestart, ServeConfig.Restart gives a fresh engine and a new worker serves on it.
//
// Swapping whole workers keeps reloading out of the worker's hot path: nothing a task
// touches is ever replaced under it.
type Supervisor struct {
	service.State
	cfg ServeConfig
	log *slog.Logger

	mu       sync.Mutex
	running  bool          // the supervising goroutine was launched
	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
}

// DefaultWatchInterval is how often the supervisor looks at the flows file and its modules.
const DefaultWatchInterval = 500 * time.Millisecond

// ServeConfig configures a Supervisor.
type ServeConfig struct {
	// FlowsPath is the flows file, loaded at start and watched. Or Flows, a file already
	// loaded (built in Go): it is served as it is, never reloaded.
	FlowsPath string
	Flows     *flowfile.File
	// Worker is the template of each worker; its Flows is set to the loaded file.
	Worker Config
	// Compile creates or checks the file's flows in the database; an error refuses the
	// file. nil: compile.Compile with default options.
	Compile func(ctx context.Context, file *flowfile.File) error
	// WatchInterval is how often the files are looked at [DefaultWatchInterval]; negative:
	// never.
	WatchInterval time.Duration
	// Reload asks for a reload now (serve sends SIGHUP here).
	Reload <-chan os.Signal
	// OnServe is told each worker that starts serving, and its file (the dashboard follows).
	OnServe func(*Worker, *flowfile.File)
	// Restart, when set, gives a fresh engine after a worker ended with ErrRestart, and the
	// supervisor serves on with it; nil: the supervisor ends with ErrRestart (the process
	// then starts afresh).
	Restart func() (sandbox.Engine, error)
}

// NewSupervisor returns a Supervisor; nothing is loaded before Start.
func NewSupervisor(cfg ServeConfig) *Supervisor {
	if cfg.WatchInterval == 0 {
		cfg.WatchInterval = DefaultWatchInterval
	}
	if cfg.Flows != nil {
		cfg.WatchInterval, cfg.Reload = -1, nil // nothing on disk to follow
	}
	if cfg.Compile == nil {
		pool := cfg.Worker.Pool
		cfg.Compile = func(ctx context.Context, file *flowfile.File) error {
			_, err := compile.Compile(ctx, pool, file, compile.Options{})
			return err
		}
	}
	// One process id for every worker the supervisor starts: an operator's drain outlives
	// reloads and engine restarts.
	cfg.Worker.Process = cfg.Worker.WithDefaults().Process
	return &Supervisor{cfg: cfg, log: cfg.Worker.WithDefaults().Log, stop: make(chan struct{})}
}

// Start loads and compiles the flows and returns once the first worker serves, or with the
// reason it could not (then the supervisor has ended: Stopped is closed, Err says why).
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return errors.New("the supervisor was started already")
	}
	cur, err := startGeneration(ctx, s.cfg, nil)
	if err != nil {
		s.EndWith(err)
		return err
	}
	s.running = true
	s.SetStarted()
	go func() { s.EndWith(s.supervise(cur)) }()
	return nil
}

// Stop drains the serving worker (and any still draining after a reload) and returns once
// they have ended. Err (service.State) is then why the supervisor ended: nil after Stop,
// ErrRestart when abandoned calls piled up and no Restart was given, or the error that
// ended serving.
func (s *Supervisor) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.mu.Lock()
	running := s.running
	s.mu.Unlock()
	if !running {
		s.SetStopped()
	}
	<-s.Stopped()
}

// Serve runs a Supervisor until ctx is done (then the current worker drains and Serve
// returns nil) or serving ends on its own (its error, such as ErrRestart).
func Serve(ctx context.Context, cfg ServeConfig) error {
	s := NewSupervisor(cfg)
	if err := s.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it served
		}
		return err
	}
	select {
	case <-ctx.Done():
		s.Stop()
	case <-s.Stopped():
	}
	return s.Err()
}

// generation is one worker and what it was built from.
type generation struct {
	w     *Worker
	file  *flowfile.File
	files map[string]fileSnapshot // flows.yaml and every module, as loaded
}

// supervise follows the files and the serving worker until Stop or the worker's own end.
func (s *Supervisor) supervise(cur *generation) error {
	cfg := s.cfg
	var draining sync.WaitGroup
	defer draining.Wait()
	watch := &fileWatch{}
	watch.reset(cur.files)
	var tick <-chan time.Time
	if cfg.WatchInterval > 0 {
		t := time.NewTicker(cfg.WatchInterval)
		defer t.Stop()
		tick = t.C
	}
	ctx := context.Background()
	for {
		var why string
		select {
		case <-s.stop:
			cur.w.Stop()
			return cur.w.Err()
		case <-cur.w.Stopped():
			err := cur.w.Err()
			if !errors.Is(err, ErrRestart) || cfg.Restart == nil {
				return err
			}
			s.log.Warn("restarting the worker on a fresh engine: handler calls the sandbox abandoned piled up")
			engine, rerr := cfg.Restart()
			if rerr != nil {
				return errors.Join(err, rerr)
			}
			cfg.Worker.Engine = engine
			next, serr := startGeneration(ctx, cfg, nil)
			if serr != nil {
				return errors.Join(err, serr)
			}
			cur = next
			watch.reset(cur.files)
			continue
		case <-cfg.Reload:
			why = "reload asked for (SIGHUP)"
		case <-tick:
			changed := watch.changed(cur.file, cur.w, cfg.FlowsPath)
			if len(changed) == 0 {
				continue
			}
			why = fmt.Sprintf("changed: %v", changed)
		}
		next, err := startGeneration(ctx, cfg, cur)
		countReload(cfg.Worker.Metrics, err == nil)
		if err != nil {
			s.log.Error("reload refused: still serving the flows loaded before", "why", why, "error", err)
			// Look again only when a file changes anew: the same broken file is not retried.
			watch.reset(snapshotOf(cfg.FlowsPath, cur.file, cur.w))
			continue
		}
		logReload(s.log, cur, next, why)
		old := cur
		cur = next
		watch.reset(cur.files)
		draining.Add(1)
		go func() {
			defer draining.Done()
			old.w.Stop() // drains: running tasks finish on the old modules
		}()
	}
}

// countReload counts a reload and keeps whether the last one was applied.
func countReload(m *telemetry.Metrics, applied bool) {
	if m == nil {
		return
	}
	if applied {
		m.Reloads.WithLabelValues("applied").Inc()
		m.ReloadOK.Set(1)
		return
	}
	m.Reloads.WithLabelValues("refused").Inc()
	m.ReloadOK.Set(0)
}

// startGeneration loads the file and its modules, compiles the flows and starts a worker;
// it returns once that worker serves. On any error nothing keeps running.
func startGeneration(ctx context.Context, cfg ServeConfig, prev *generation) (*generation, error) {
	file := cfg.Flows
	if file == nil {
		var err error
		if file, err = flowfile.Load(cfg.FlowsPath); err != nil {
			return nil, err
		}
	}
	// The files as they are before loading: one that changes while it is loaded (a build
	// writing it twice) is not known to match what was loaded, so the watch looks again.
	before := snapshotOf(cfg.FlowsPath, file, nil)
	wc := cfg.Worker
	wc.Flows = file
	// Each worker has its own health: the process's (cfg.Worker.Health) follows the one that
	// serves, so an old worker's drain does not make a reloaded process unready.
	wc.Health = &telemetry.Health{}
	if prev == nil && cfg.Worker.Health != nil {
		cfg.Worker.Health.Follow(wc.Health) // nothing serves yet: say what this one waits for
	}
	w, err := New(ctx, wc)
	if err != nil {
		return nil, err
	}
	if err := cfg.Compile(ctx, file); err != nil {
		w.closeModules(context.WithoutCancel(ctx))
		return nil, err
	}
	files := snapshotOf(cfg.FlowsPath, file, w)
	for p, b := range before {
		if files[p].hash != b.hash {
			files[p] = fileSnapshot{} // changed while loading: what was loaded is not known, so the watch hashes it again
		}
	}
	if err := w.Start(ctx); err != nil {
		if prev == nil {
			return nil, err
		}
		return nil, fmt.Errorf("the new worker did not start: %w", err)
	}
	g := &generation{w: w, file: file, files: files}
	if cfg.Worker.Health != nil {
		cfg.Worker.Health.Follow(wc.Health)
	}
	if cfg.OnServe != nil {
		cfg.OnServe(w, file)
	}
	return g, nil
}

// logReload says what changed: flows added and removed, modules with their old and new sha256.
func logReload(log *slog.Logger, old, next *generation, why string) {
	log.Info("reloaded: new tasks run on the new flows and modules; tasks already running finish on the old", "why", why,
		"old_workers", workerList(old.w), "new_workers", workerList(next.w))
	for _, fl := range next.file.Flows {
		if old.file.Flow(fl.Slug) == nil {
			log.Info("reload: flow added", "flow", fl.Slug)
		}
	}
	for _, fl := range old.file.Flows {
		if next.file.Flow(fl.Slug) == nil {
			log.Info("reload: flow no longer served by this worker", "flow", fl.Slug)
		}
	}
	for _, fl := range next.file.Flows {
		for _, s := range fl.Served() {
			newInfo, _ := next.w.ModuleInfo(fl.Slug, s.Slug)
			oldInfo, ok := old.w.ModuleInfo(fl.Slug, s.Slug)
			switch {
			case !ok:
				log.Info("reload: step added", "flow", fl.Slug, "step", s.Slug, "sha256", newInfo.SHA256)
			case oldInfo.SHA256 != newInfo.SHA256:
				log.Info("reload: module replaced", "flow", fl.Slug, "step", s.Slug, "module", s.Module,
					"old_sha256", oldInfo.SHA256, "new_sha256", newInfo.SHA256)
			}
		}
	}
}

// workerList names a worker's pgflow.workers rows, "flow=id" each, for logs.
func workerList(w *Worker) string {
	var parts []string
	for _, fs := range w.flows {
		parts = append(parts, fs.def.Slug+"="+fs.workerID)
	}
	return strings.Join(parts, " ")
}

// fileWatch notices changed files cheaply: a file is hashed again only when its size or
// modification time moved and then stayed put for one look (a compiler may still be writing
// it), and counts as changed only when its sha256 did.
type fileWatch struct {
	stats   map[string]fileStat
	pending map[string]fileStat // moved at the last look
	hashes  map[string]string
}

type fileStat struct {
	size int64
	mod  time.Time
}

// fileSnapshot is a file's size and time, taken before its sha256 was read: a write after
// the read moves the stat away from the one kept, so the watch looks at the file again. (A
// stat taken later could already show that write beside the older hash, and the change
// would go unseen: a build's second write landing while the worker it had started was
// starting left the module it wrote unloaded for good.)
type fileSnapshot struct {
	stat fileStat
	hash string // "" when unknown or unreadable: hashed again at the next looks
}

func (fw *fileWatch) reset(files map[string]fileSnapshot) {
	fw.hashes = map[string]string{}
	fw.stats = map[string]fileStat{}
	fw.pending = map[string]fileStat{}
	for p, f := range files {
		fw.hashes[p] = f.hash
		fw.stats[p] = f.stat
		if f.hash == "" {
			fw.stats[p] = fileStat{size: -2}
		}
	}
}

// changed lists the watched files (flows.yaml, the modules of file and the sources w's
// TypeScript handlers were bundled from) whose content differs from when reset was called.
func (fw *fileWatch) changed(file *flowfile.File, w *Worker, flowsPath string) []string {
	var out []string
	for _, p := range watchedPaths(flowsPath, file, w) {
		st := statOf(p)
		if old, ok := fw.stats[p]; ok && old == st {
			continue
		}
		if prev, ok := fw.pending[p]; !ok || prev != st {
			fw.pending[p] = st // look again next time
			continue
		}
		delete(fw.pending, p)
		fw.stats[p] = st
		if h := hashFile(p); h != fw.hashes[p] {
			out = append(out, p)
		}
	}
	return out
}

func watchedPaths(flowsPath string, file *flowfile.File, w *Worker) []string {
	paths := []string{flowsPath}
	if file == nil {
		return paths
	}
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	for _, fl := range file.Flows {
		for _, s := range fl.Served() { // an external step has no module to watch
			add(s.Module)
		}
	}
	if w != nil {
		for _, p := range w.moduleSources() {
			add(p)
		}
	}
	return paths
}

// snapshotOf stats and hashes the watched files, each stat before its hash.
func snapshotOf(flowsPath string, file *flowfile.File, w *Worker) map[string]fileSnapshot {
	out := map[string]fileSnapshot{}
	for _, p := range watchedPaths(flowsPath, file, w) {
		st := statOf(p)
		out[p] = fileSnapshot{stat: st, hash: hashFile(p)}
	}
	return out
}

func statOf(p string) fileStat {
	fi, err := os.Stat(p)
	if err != nil {
		return fileStat{size: -1}
	}
	return fileStat{size: fi.Size(), mod: fi.ModTime()}
}

// hashFile is the file's sha256 in hex; "" when it cannot be read (a module being rewritten).
// A folder (served without a flows file) hashes as the list of its entries' names: a flow
// file added or removed is a change; an edited one is watched as a module.
func hashFile(p string) string {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		entries, err := os.ReadDir(p)
		if err != nil {
			return ""
		}
		h := sha256.New()
		for _, e := range entries {
			fmt.Fprintf(h, "%s\x00", e.Name())
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
