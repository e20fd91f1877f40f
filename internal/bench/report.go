package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Percentiles of a latency, in milliseconds.
type Percentiles struct {
	N             int
	P50, P95, P99 float64
}

// Result is one contender on one shape under one fsync setting.
type Result struct {
	Contender string
	Kind      string
	Shape     string
	Fsync     string
	Layer     string // the pgmq it ran on: LayerOurs or LayerReal
	Round     int    // 1.. (Config.Rounds)
	Tasks     int
	// Seconds spans the first task started to the last completed (database clock).
	Seconds      float64
	TasksPerSec  float64
	RatioToFloor float64 // TasksPerSec / the floor's, same shape and fsync; 0 when unknown
	Latency      Percentiles
	Hop          Percentiles // chain only: one step's completion to the next step's start
	HopParts     []HopPart   // chain only: where a hop's time goes (hops.go)
	// Statements are the costliest statements of the measurement (Config.Statements);
	// StatementsErr says why they could not be read.
	Statements    []Statement `json:",omitempty"`
	StatementsErr string      `json:",omitempty"`
	// Workers is set on the workers shape (workers.go): how many processes, lock waits,
	// connections. Its other columns: throughput and CPU of the one-step runs, Hop and
	// Latency of the chain.
	Workers   *WorkersResult `json:",omitempty"`
	WorkerCPU time.Duration
	DBCPU     time.Duration // -1 when the server is not local
	PeakRSS   int64
	Err       string
}

// name is the contender's name in the report: with more than one round, and the round.
func (r Result) name(rounds int) string {
	if rounds > 1 {
		return fmt.Sprintf("%s #%d", r.label(), r.Round)
	}
	return r.label()
}

// label is the contender's name, after "real/" when it ran on the real pgmq.
func (r Result) label() string {
	if r.Layer == LayerReal {
		return "real/" + r.Contender
	}
	return r.Contender
}

// CPUPer1000 is the contender's CPU seconds per 1,000 tasks.
func (r Result) CPUPer1000() float64 { return per1000(r.WorkerCPU, r.Tasks) }

// DBCPUPer1000 is the database's CPU seconds per 1,000 tasks, or -1.
func (r Result) DBCPUPer1000() float64 {
	if r.DBCPU < 0 {
		return -1
	}
	return per1000(r.DBCPU, r.Tasks)
}

func per1000(d time.Duration, tasks int) float64 {
	if tasks == 0 {
		return 0
	}
	return d.Seconds() * 1000 / float64(tasks)
}

func (r Result) summary() string {
	if r.Err != "" {
		return "ERROR " + firstLine(r.Err)
	}
	s := fmt.Sprintf("%7.0f tasks/s  p50 %6.1f ms", r.TasksPerSec, r.Latency.P50)
	if r.Shape == ShapeChain {
		s += fmt.Sprintf("  hop p50 %5.1f ms", r.Hop.P50)
	}
	return s + fmt.Sprintf("  cpu %.3f s/1k  rss %d MB", r.CPUPer1000(), r.PeakRSS>>20)
}

// Idle is what an idle worker costs.
type Idle struct {
	Flows          int
	LimitedFlows   int // flows with max_concurrency (an idle one once polled thousands of times a second)
	Seconds        float64
	Transactions   int64   // committed + rolled back in the worker's database over the window
	PerSecPerFlow  float64 // transactions per second per flow
	RSS            int64   // resident memory at the end of the window
	Signal, Engine string
	Err            string
}

// Report is a whole benchmark run.
type Report struct {
	Started, Finished time.Time
	Server            string
	Pgflow            string // the pgflow release of the benchmark databases
	Config            Config `json:"-"`
	Results           []Result
	Idle              *Idle
}

func (rep *Report) fillRatios() {
	for i, r := range rep.Results {
		if f, ok := rep.floorOf(r); ok && f.TasksPerSec > 0 {
			rep.Results[i].RatioToFloor = r.TasksPerSec / f.TasksPerSec
		}
	}
}

// floorOf is the floor's result of r's shape, fsync setting, round and pgmq layer.
func (rep *Report) floorOf(r Result) (Result, bool) {
	for _, f := range rep.Results {
		if f.Kind == KindFloor && f.Err == "" && f.Shape == r.Shape && f.Fsync == r.Fsync && f.Round == r.Round && f.Layer == r.Layer {
			return f, true
		}
	}
	return Result{}, false
}

// WriteJSON writes the report as JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes one table per fsync setting and shape, plus the idle figures, as
// Markdown (readable in a terminal too).
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "pgflow-wasm bench, %s (%s)\n%s, pgflow %s\n", rep.Started.Format("2006-01-02 15:04"), rep.Finished.Sub(rep.Started).Round(time.Second), rep.Server, rep.Pgflow)
	titles := map[string]string{
		ShapeOneStep: fmt.Sprintf("one-step runs (%d, queued before the contender starts; latency: %d runs, %d in flight)",
			rep.Config.OneStepRuns, rep.Config.LatencyRuns, rep.Config.LatencyInFlight),
		ShapeMap:   fmt.Sprintf("one run, map step of %d elements", rep.Config.MapSize),
		ShapeChain: fmt.Sprintf("%d runs of a %d-step chain, %d in flight", rep.Config.ChainRuns, rep.Config.ChainLength, rep.Config.ChainInFlight),
	}
	for _, fsync := range rep.Config.Fsync {
		for _, shape := range rep.Config.Shapes {
			if shape == ShapeWorkers {
				rep.writeWorkers(w, fsync)
				continue
			}
			fmt.Fprintf(w, "\n### fsync %s: %s\n\n", fsync, titles[shape])
			tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
			hop := ""
			if shape == ShapeChain {
				hop = "\t hop p50 ms\t hop p95 ms"
			}
			fmt.Fprintf(tw, "| contender\t tasks/s\t x floor\t p50 ms\t p95 ms\t p99 ms%s\t cpu s/1k tasks\t db cpu s/1k tasks\t cpu / db\t peak rss MB\t\n", hop)
			fmt.Fprintf(tw, "|---\t---\t---\t---\t---\t---%s\t---\t---\t---\t---\t\n", strings.Repeat("\t---", strings.Count(hop, "\t")))
			for _, r := range rep.Results {
				if r.Fsync != fsync || r.Shape != shape {
					continue
				}
				if r.Err != "" {
					fmt.Fprintf(tw, "| %s\t error: %s\t\n", r.name(rep.Config.Rounds), firstLine(r.Err))
					continue
				}
				hopCols := ""
				if shape == ShapeChain {
					hopCols = fmt.Sprintf("\t %.1f\t %.1f", r.Hop.P50, r.Hop.P95)
				}
				fmt.Fprintf(tw, "| %s\t %.0f\t %s\t %.1f\t %.1f\t %.1f%s\t %.3f\t %s\t %s\t %d\t\n", r.name(rep.Config.Rounds), r.TasksPerSec, ratio(r.RatioToFloor),
					r.Latency.P50, r.Latency.P95, r.Latency.P99, hopCols, r.CPUPer1000(), dbCol(r.DBCPUPer1000()), share(r), r.PeakRSS>>20)
			}
			tw.Flush()
			rep.writeRounds(w, fsync, shape)
			if shape == ShapeChain {
				rep.writeHopParts(w, fsync)
			}
		}
	}
	rep.writeStatements(w)
	if i := rep.Idle; i != nil {
		fmt.Fprintf(w, "\n### idle worker (%s, %s, the example flows.yaml: %d flows, %d with max_concurrency)\n\n", i.Engine, i.Signal, i.Flows, i.LimitedFlows)
		if i.Err != "" {
			fmt.Fprintf(w, "error: %s\n", i.Err)
		} else {
			fmt.Fprintf(w, "%d transactions in %.0f s: %.3f per second per flow; RSS %d MB\n", i.Transactions, i.Seconds, i.PerSecPerFlow, i.RSS>>20)
		}
	}
}

func ratio(r float64) string {
	if r == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r)
}

func dbCol(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", v)
}

func share(r Result) string {
	if r.DBCPU <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*r.WorkerCPU.Seconds()/r.DBCPU.Seconds())
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 160 {
		line = line[:160] + "..."
	}
	return line
}

// writeHopParts writes where the chain's hops went: one row per leg, one column per
// contender, "p50 (p95)" in milliseconds.
func (rep *Report) writeHopParts(w io.Writer, fsync string) {
	var rs []Result
	var legs []string
	seen := map[string]bool{}
	for _, r := range rep.Results {
		if r.Fsync != fsync || r.Shape != ShapeChain || r.Err != "" || len(r.HopParts) == 0 {
			continue
		}
		rs = append(rs, r)
		for _, p := range r.HopParts {
			if !seen[p.Name] {
				seen[p.Name] = true
				legs = append(legs, p.Name)
			}
		}
	}
	if len(rs) == 0 {
		return
	}
	order := []string{LegWaitToWrite, LegCompletion, LegCommitToldAt, LegToldToWoke, LegWokeToRead, LegCommitToRead,
		LegReadToStart, LegStartToGot, LegGotToRun, LegHandlerToRun, LegTimerWoke}
	slices.SortStableFunc(legs, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	fmt.Fprintf(w, "\nwhere a hop goes (fsync %s), ms, p50 (p95); a hop is `completed_at -> commit` + `commit -> read` + `read -> start_tasks`:\n\n", fsync)
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| leg")
	for _, r := range rs {
		fmt.Fprintf(tw, "\t %s", r.name(rep.Config.Rounds))
	}
	fmt.Fprintf(tw, "\t\n|---%s\t\n", strings.Repeat("\t---", len(rs)))
	fmt.Fprintf(tw, "| hop (completed_at -> start_tasks)")
	for _, r := range rs {
		fmt.Fprintf(tw, "\t %.1f (%.1f)", r.Hop.P50, r.Hop.P95)
	}
	fmt.Fprintf(tw, "\t\n")
	for _, leg := range legs {
		fmt.Fprintf(tw, "| %s", leg)
		for _, r := range rs {
			i := slices.IndexFunc(r.HopParts, func(p HopPart) bool { return p.Name == leg })
			switch {
			case i < 0:
				fmt.Fprintf(tw, "\t ")
			case leg == LegTimerWoke:
				fmt.Fprintf(tw, "\t %.0f%% of %d", r.HopParts[i].P50, r.HopParts[i].N)
			default:
				fmt.Fprintf(tw, "\t %.2f (%.2f)", r.HopParts[i].P50, r.HopParts[i].P95)
			}
		}
		fmt.Fprintf(tw, "\t\n")
	}
	tw.Flush()
}

// writeWorkers writes the workers shape: one row per worker count.
func (rep *Report) writeWorkers(w io.Writer, fsync string) {
	fmt.Fprintf(w, "\n### fsync %s: N worker processes on one database (%d one-step runs, shown to the workers once all are ready; then %d runs of the %d-step chain, %d in flight; hop: handler end -> next handler start)\n\n",
		fsync, rep.Config.OneStepRuns, rep.Config.ChainRuns, rep.Config.ChainLength, rep.Config.ChainInFlight)
	best := 0.0
	for _, r := range rep.Results {
		if r.Fsync == fsync && r.Shape == ShapeWorkers && r.Err == "" {
			best = max(best, r.TasksPerSec)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| contender\t tasks/s\t x best\t hop p50 ms\t hop p95 ms\t chain p50 ms\t db cpu s/1k tasks\t cpu s/1k tasks\t lock waiters (mean)\t samples with a lock wait\t most waited lock\t connections (per worker)\t tasks per fetch\t tasks per write\t peak rss MB\t\n")
	fmt.Fprintf(tw, "|---%s\t\n", strings.Repeat("\t---", 14))
	for _, r := range rep.Results {
		if r.Fsync != fsync || r.Shape != ShapeWorkers {
			continue
		}
		if r.Err != "" || r.Workers == nil {
			fmt.Fprintf(tw, "| %s\t error: %s\t\n", r.name(rep.Config.Rounds), firstLine(r.Err))
			continue
		}
		x := r.Workers
		hop := Percentiles{P50: -1, P95: -1}
		if i := slices.IndexFunc(r.HopParts, func(p HopPart) bool { return p.Name == LegHandlerToRun }); i >= 0 {
			hop.P50, hop.P95 = r.HopParts[i].P50, r.HopParts[i].P95
		}
		fmt.Fprintf(tw, "| %s\t %.0f\t %.2f\t %.1f\t %.1f\t %.1f\t %s\t %.3f\t %.2f\t %.0f%%\t %s\t %d (%.1f)\t %.1f\t %.1f\t %d\t\n", r.name(rep.Config.Rounds), r.TasksPerSec, r.TasksPerSec/best,
			hop.P50, hop.P95, r.Latency.P50, dbCol(r.DBCPUPer1000()), r.CPUPer1000(), x.LockWaits, 100*x.LockWaitShare, x.TopLockWait, x.Connections, x.ConnsPerWorker,
			x.TasksPerFetch, x.TasksPerWrite, r.PeakRSS>>20)
	}
	tw.Flush()
}

// writeRounds writes, after several rounds, each contender's median over the rounds: of its
// throughput, latency p50 (a whole run's), hop and database CPU, and of each round's ratio of
// them to the floor's in the same round (the figure to quote on a noisy machine).
func (rep *Report) writeRounds(w io.Writer, fsync, shape string) {
	if rep.Config.Rounds <= 1 {
		return
	}
	type figures struct{ tps, tpsX, p50, p50X, hop, hopX, db, dbX []float64 }
	var names []string
	by := map[string]*figures{}
	for _, r := range rep.Results {
		if r.Fsync != fsync || r.Shape != shape || r.Err != "" {
			continue
		}
		f := by[r.label()]
		if f == nil {
			f = &figures{}
			by[r.label()] = f
			names = append(names, r.label())
		}
		f.tps, f.p50, f.hop = append(f.tps, r.TasksPerSec), append(f.p50, r.Latency.P50), append(f.hop, r.Hop.P50)
		if db := r.DBCPUPer1000(); db >= 0 {
			f.db = append(f.db, db)
		}
		if fl, ok := rep.floorOf(r); ok {
			f.tpsX = append(f.tpsX, r.TasksPerSec/fl.TasksPerSec)
			if fl.Latency.P50 > 0 {
				f.p50X = append(f.p50X, r.Latency.P50/fl.Latency.P50)
			}
			if fl.Hop.P50 > 0 {
				f.hopX = append(f.hopX, r.Hop.P50/fl.Hop.P50)
			}
			if db, fdb := r.DBCPUPer1000(), fl.DBCPUPer1000(); db >= 0 && fdb > 0 {
				f.dbX = append(f.dbX, db/fdb)
			}
		}
	}
	med := func(v []float64, format string) string {
		if len(v) == 0 {
			return "n/a"
		}
		return fmt.Sprintf(format, quantile(slices.Clone(v), 0.5))
	}
	fmt.Fprintf(w, "\nmedians of %d rounds (fsync %s, %s); x floor: the median of each round's ratio to the floor's figure in that round:\n\n", rep.Config.Rounds, fsync, shape)
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| contender\t rounds\t tasks/s\t x floor\t p50 ms\t p50 x floor\t hop p50 ms\t hop x floor\t db cpu s/1k tasks\t db cpu x floor\t\n|---%s\t\n", strings.Repeat("\t---", 9))
	for _, n := range names {
		f := by[n]
		hop, hopX := "", ""
		if shape == ShapeChain {
			hop, hopX = med(f.hop, "%.1f"), med(f.hopX, "%.2f")
		}
		fmt.Fprintf(tw, "| %s\t %d\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", n, len(f.tps), med(f.tps, "%.0f"), med(f.tpsX, "%.2f"),
			med(f.p50, "%.1f"), med(f.p50X, "%.2f"), hop, hopX, med(f.db, "%.3f"), med(f.dbX, "%.2f"))
	}
	tw.Flush()
}
