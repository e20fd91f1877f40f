package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// HopPart is one leg of a chain's step-to-step hop, in milliseconds over every hop of the
// shape: N hops had both of its ends.
type HopPart struct {
	Name     string
	N        int
	P50, P95 float64
}

// The legs of a hop, in the order they happen. The first three come from the database and
// are measured for every contender; the others need the worker's task trace (pgflow-wasm
// only). A hop (the Hop column) runs from the predecessor's completed_at, which pgflow sets
// to the start of the transaction that completes it, to the successor's claim: the start of
// the transaction of start_tasks (started_at), or, where the task trace says when start_tasks
// was sent (pgflow-wasm, whose read and start_tasks share a transaction that began before
// the read), that moment; but not before the predecessor's commit (claimAt).
const (
	LegWaitToWrite  = "handler end -> write sent"          // the outcome waits for a writer (before the hop)
	LegCompletion   = "completed_at -> commit"             // the completion's transaction: its statements and the commit
	LegCommitToRead = "commit -> read"                     // the successor's message is visible at the commit: until a reader reads it
	LegReadToStart  = "read -> start_tasks"                // the read's reply, then start_tasks sent (the hop's end)
	LegCommitToldAt = "commit -> worker told"              // the commit's reply reaches the completer
	LegToldToWoke   = "told -> fetch loop woke"            // the completion rings its flow's fetch loop
	LegWokeToRead   = "woke -> read"                       // pgmq.read sent and run
	LegStartToGot   = "start_tasks -> tasks back"          // start_tasks, the attempts query and their commit
	LegGotToRun     = "tasks back -> handler start"        // a goroutine per task, its context, the sandbox's instance
	LegHandlerToRun = "handler end -> next handler start"  // the whole hop as a user's flow feels it
	LegTimerWoke    = "fetches woken by the timer (share)" // N: fetches; P50: the share in percent
)

// hopRow is one hop of a chain with the database's timestamps, Unix microseconds (0: not
// known).
type hopRow struct {
	run, prev, next string
	completedAt     float64 // prev's completed_at: its completion's transaction began
	committed       float64 // that transaction's commit (track_commit_timestamp)
	read            float64 // next's message read (its archived vt less the read's visibility)
	startedAt       float64 // next's started_at: start_tasks' transaction began
}

// claimAt is where the hop h ends: when start_tasks was sent (trace, claim), else when its
// transaction began, and never before the predecessor's completion committed: a claim
// sends start_tasks in the completing transaction's own batch, before that transaction
// began on the server, and the successor is started for the world only at its commit.
// Where the database does not keep commit times (track_commit_timestamp off), seen bounds
// it instead: when the worker had the commit's reply (trace), 0 unknown.
func (h hopRow) claimAt(claim, seen int64) float64 {
	at := h.startedAt
	if claim > 0 {
		at = float64(claim)
	}
	if h.committed > 0 {
		return max(at, h.committed)
	}
	return max(at, float64(seen))
}

// traceLine is a line of the worker's task trace (worker.TraceLine).
type traceLine struct {
	Run          string `json:"run"`
	Step         string `json:"step"`
	Cause        string `json:"cause"`
	Woke         int64  `json:"woke"`
	Claim        int64  `json:"claim"`
	Fetched      int64  `json:"fetched"`
	HandlerStart int64  `json:"hstart"`
	HandlerEnd   int64  `json:"hend"`
	WriteBegan   int64  `json:"wbegin"`
	Committed    int64  `json:"commit"`
}

// hopBreakdown measures every hop of a chain flow (percentiles, in ms) and its legs.
// tracePaths are the workers' task traces (none, or "", for contenders without one).
func hopBreakdown(ctx context.Context, pool *pgxpool.Pool, flow string, tracePaths ...string) (Percentiles, []HopPart, error) {
	var commitTS string
	if err := pool.QueryRow(ctx, `show track_commit_timestamp`).Scan(&commitTS); err != nil {
		return Percentiles{}, nil, err
	}
	committed := "null::float8"
	if commitTS == "on" {
		committed = "extract(epoch from pg_xact_commit_timestamp(prv.xmin))::float8 * 1e6"
	}
	archive := schema.ArchiveTable(flow)
	// The read's visibility (pgmq.read's vt argument) is the whole seconds between a message's
	// enqueueing and its vt, for almost every message: a message waits milliseconds.
	rows, err := pool.Query(ctx, `
		with rv as (select mode() within group (order by floor(extract(epoch from vt - enqueued_at))) s from `+archive+`)
		select prv.run_id::text, prv.step_slug, nxt.step_slug,
		  extract(epoch from prv.completed_at)::float8 * 1e6, coalesce(`+committed+`, 0),
		  coalesce(extract(epoch from a.vt - make_interval(secs => rv.s))::float8 * 1e6, 0),
		  extract(epoch from nxt.started_at)::float8 * 1e6
		from pgflow.step_tasks prv
		join pgflow.deps d on d.flow_slug = prv.flow_slug and d.dep_slug = prv.step_slug
		join pgflow.step_tasks nxt on nxt.run_id = prv.run_id and nxt.step_slug = d.step_slug
		cross join rv
		left join `+archive+` a on a.msg_id = nxt.message_id and a.read_ct = 1
		where prv.flow_slug = $1 and prv.status = 'completed' and nxt.started_at is not null`, flow)
	if err != nil {
		return Percentiles{}, nil, err
	}
	hops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hopRow, error) {
		var h hopRow
		return h, r.Scan(&h.run, &h.prev, &h.next, &h.completedAt, &h.committed, &h.read, &h.startedAt)
	})
	if err != nil {
		return Percentiles{}, nil, err
	}
	trace := map[[2]string]traceLine{}
	for _, path := range tracePaths {
		if path == "" {
			continue
		}
		if err := readTrace(path, trace); err != nil {
			return Percentiles{}, nil, err
		}
	}
	legs := map[string][]float64{}
	add := func(name string, from, to float64) {
		if from > 0 && to > 0 {
			legs[name] = append(legs[name], (to-from)/1000)
		}
	}
	var whole []float64
	for _, h := range hops {
		add(LegCompletion, h.completedAt, h.committed)
		p, okP := trace[[2]string{h.run, h.prev}]
		n, okN := trace[[2]string{h.run, h.next}]
		claim := h.claimAt(n.Claim, p.Committed)
		whole = append(whole, (claim-h.completedAt)/1000)
		add(LegCommitToRead, h.committed, h.read)
		add(LegReadToStart, h.read, claim)
		if !okP || !okN {
			continue
		}
		add(LegWaitToWrite, float64(p.HandlerEnd), float64(p.WriteBegan))
		add(LegCommitToldAt, h.committed, float64(p.Committed))
		add(LegToldToWoke, float64(p.Committed), float64(n.Woke))
		add(LegWokeToRead, float64(n.Woke), h.read)
		add(LegStartToGot, claim, float64(n.Fetched))
		add(LegGotToRun, float64(n.Fetched), float64(n.HandlerStart))
		add(LegHandlerToRun, float64(p.HandlerEnd), float64(n.HandlerStart))
	}
	var out []HopPart
	for _, name := range []string{LegWaitToWrite, LegCompletion, LegCommitToldAt, LegToldToWoke, LegWokeToRead,
		LegCommitToRead, LegReadToStart, LegStartToGot, LegGotToRun, LegHandlerToRun} {
		if v := legs[name]; len(v) > 0 {
			out = append(out, HopPart{Name: name, N: len(v), P50: quantile(v, 0.5), P95: quantile(v, 0.95)})
		}
	}
	if len(trace) > 0 {
		timer := 0
		for _, l := range trace {
			if l.Cause == "timer" {
				timer++
			}
		}
		out = append(out, HopPart{Name: LegTimerWoke, N: len(trace), P50: 100 * float64(timer) / float64(len(trace))})
	}
	var hop Percentiles
	if hop.N = len(whole); hop.N > 0 {
		hop.P50, hop.P95, hop.P99 = quantile(whole, 0.5), quantile(whole, 0.95), quantile(whole, 0.99)
	}
	return hop, out, nil
}

// readTrace adds the lines of one task trace to out.
func readTrace(path string, out map[[2]string]traceLine) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l traceLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out[[2]string{l.Run, l.Step}] = l
		}
	}
	return sc.Err()
}

// quantile is the q-quantile of v, interpolated as percentile_cont does; it sorts v.
func quantile(v []float64, q float64) float64 {
	slices.Sort(v)
	pos := q * float64(len(v)-1)
	i := int(pos)
	if i+1 >= len(v) {
		return v[len(v)-1]
	}
	return v[i] + (pos-float64(i))*(v[i+1]-v[i])
}
