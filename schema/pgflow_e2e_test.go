package schema_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// These tests drive pgflow 0.8.1's SQL the way a worker does (pgflow-protocol.md), on both
// forms of our pgmq layer: create_flow/add_step, start_flow, register, read, start_tasks,
// complete_task / fail_task, and the realtime events.

type flowDB struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	url    string
	worker string
}

func newFlowDB(t *testing.T, mode schema.LayerMode) *flowDB {
	db := pgtest.NewDB(t, pgtest.Layer(mode))
	return &flowDB{t: t, ctx: context.Background(), pool: db.Pool, url: db.URL}
}

func (f *flowDB) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// flow creates a flow: steps are "slug", "slug<-dep1,dep2" or "map:slug<-dep".
func (f *flowDB) flow(slug string, maxAttempts, baseDelay int, steps ...string) {
	f.t.Helper()
	f.exec(`SELECT pgflow.create_flow($1, $2, $3, 60)`, slug, maxAttempts, baseDelay)
	for _, s := range steps {
		kind := "single"
		if rest, ok := strings.CutPrefix(s, "map:"); ok {
			kind, s = "map", rest
		}
		name, depList, _ := strings.Cut(s, "<-")
		deps := []string{}
		if depList != "" {
			deps = strings.Split(depList, ",")
		}
		f.exec(`SELECT pgflow.add_step(flow_slug => $1, step_slug => $2, deps_slugs => $3, step_type => $4)`, slug, name, deps, kind)
	}
}

func (f *flowDB) register(flow string) {
	f.t.Helper()
	var r [16]byte
	rand.Read(r[:])
	r[6], r[8] = r[6]&0x0f|0x40, r[8]&0x3f|0x80
	h := hex.EncodeToString(r[:])
	f.worker = fmt.Sprintf("%s-%s-%s-%s-%s", h[:8], h[8:12], h[12:16], h[16:20], h[20:])
	f.exec(`INSERT INTO pgflow.workers (worker_id, queue_name, function_name) VALUES ($1, $2, 'pgflow-wasm-test')`, f.worker, flow)
}

func (f *flowDB) start(flow string, input string) string {
	f.t.Helper()
	var runID string
	if err := f.pool.QueryRow(f.ctx, `SELECT run_id::text FROM pgflow.start_flow($1, $2::jsonb)`, flow, input).Scan(&runID); err != nil {
		f.t.Fatalf("start_flow(%s): %v", flow, err)
	}
	return runID
}

type task struct {
	RunID, Step string
	Index       int
	MsgID       int64
	Input       any
}

// poll is one worker round: read visible messages, then start_tasks on them.
func (f *flowDB) poll(flow string) []task {
	f.t.Helper()
	msgIDs := queryInt64s(f.t, f.pool, `SELECT msg_id FROM pgmq.read($1, 30, 100)`, flow)
	if len(msgIDs) == 0 {
		return nil
	}
	rows, err := f.pool.Query(f.ctx, `SELECT run_id::text, step_slug, task_index, msg_id, input
		FROM pgflow.start_tasks($1, $2::bigint[], $3::uuid)`, flow, msgIDs, f.worker)
	if err != nil {
		f.t.Fatalf("start_tasks: %v", err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (task, error) {
		var tk task
		return tk, r.Scan(&tk.RunID, &tk.Step, &tk.Index, &tk.MsgID, &tk.Input)
	})
	if err != nil {
		f.t.Fatalf("start_tasks: %v", err)
	}
	sort.Slice(tasks, func(i, j int) bool {
		if tasks[i].Step != tasks[j].Step {
			return tasks[i].Step < tasks[j].Step
		}
		return tasks[i].Index < tasks[j].Index
	})
	return tasks
}

func (f *flowDB) complete(tk task, output string) int {
	f.t.Helper()
	var n int
	err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pgflow.complete_task($1::uuid, $2, $3, $4::jsonb)`,
		tk.RunID, tk.Step, tk.Index, output).Scan(&n)
	if err != nil {
		f.t.Fatalf("complete_task(%s/%d): %v", tk.Step, tk.Index, err)
	}
	return n
}

func (f *flowDB) fail(tk task, msg string) {
	f.t.Helper()
	f.exec(`SELECT pgflow.fail_task($1::uuid, $2, $3, $4)`, tk.RunID, tk.Step, tk.Index, msg)
}

func (f *flowDB) run(runID string) (status string, output any) {
	f.t.Helper()
	if err := f.pool.QueryRow(f.ctx, `SELECT status, output FROM pgflow.runs WHERE run_id = $1::uuid`, runID).Scan(&status, &output); err != nil {
		f.t.Fatal(err)
	}
	return status, output
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func expectInput(t *testing.T, tk task, want string) {
	t.Helper()
	if !reflect.DeepEqual(tk.Input, jsonValue(t, want)) {
		got, _ := json.Marshal(tk.Input)
		t.Fatalf("input of %s[%d] = %s, want %s", tk.Step, tk.Index, got, want)
	}
}

func expectSteps(t *testing.T, tasks []task, want ...string) {
	t.Helper()
	var got []string
	for _, tk := range tasks {
		got = append(got, fmt.Sprintf("%s[%d]", tk.Step, tk.Index))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("started tasks %v, want %v", got, want)
	}
}

func forEachLayer(t *testing.T, test func(t *testing.T, f *flowDB)) {
	for _, mode := range []schema.LayerMode{schema.LayerExtension, schema.LayerSchema} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			test(t, newFlowDB(t, mode))
		})
	}
}

func TestPgflowDiamondFlow(t *testing.T) {
	t.Parallel()
	forEachLayer(t, func(t *testing.T, f *flowDB) {
		f.flow("diamond", 3, 1, "a", "b<-a", "c<-a", "d<-b,c")
		f.register("diamond")
		run := f.start("diamond", `{"n": 2}`)

		tasks := f.poll("diamond")
		expectSteps(t, tasks, "a[0]")
		expectInput(t, tasks[0], `{"run": {"n": 2}}`)
		if n := f.complete(tasks[0], `{"a": 0}`); n != 1 {
			t.Fatalf("complete_task returned %d rows", n)
		}
		// complete_task archives the message itself.
		var live, archived int
		f.pool.QueryRow(f.ctx, `SELECT (SELECT count(*) FROM pgmq.q_diamond WHERE msg_id = $1),
			(SELECT count(*) FROM pgmq.a_diamond WHERE msg_id = $1)`, tasks[0].MsgID).Scan(&live, &archived)
		if live != 0 || archived != 1 {
			t.Fatalf("message of a completed task: %d in the queue, %d archived", live, archived)
		}

		tasks = f.poll("diamond")
		expectSteps(t, tasks, "b[0]", "c[0]")
		expectInput(t, tasks[0], `{"run": {"n": 2}, "a": {"a": 0}}`)
		f.complete(tasks[0], `"from b"`)
		f.complete(tasks[1], `0`) // a falsy output stays 0
		tasks = f.poll("diamond")
		expectSteps(t, tasks, "d[0]")
		expectInput(t, tasks[0], `{"run": {"n": 2}, "b": "from b", "c": 0}`)
		f.complete(tasks[0], `{"total": 42}`)

		status, output := f.run(run)
		if status != "completed" || !reflect.DeepEqual(output, jsonValue(t, `{"d": {"total": 42}}`)) {
			t.Fatalf("run: %s %v; want completed with the leaf output only", status, output)
		}
		// A second complete_task is harmless.
		f.complete(tasks[0], `{"total": 43}`)
		if _, output := f.run(run); !reflect.DeepEqual(output, jsonValue(t, `{"d": {"total": 42}}`)) {
			t.Fatalf("a second complete_task changed the run output to %v", output)
		}
	})
}

func TestPgflowStartTasksNeedsARegisteredWorker(t *testing.T) {
	t.Parallel()
	f := newFlowDB(t, schema.LayerSchema)
	f.flow("reg", 3, 1, "a")
	f.start("reg", `{}`)
	ids := queryInt64s(t, f.pool, `SELECT msg_id FROM pgmq.read('reg', 30, 10)`)
	_, err := f.pool.Exec(f.ctx, `SELECT * FROM pgflow.start_tasks('reg', $1::bigint[], gen_random_uuid())`, ids)
	if err == nil || !strings.Contains(err.Error(), "step_tasks_last_worker_id_fkey") {
		t.Fatalf("start_tasks with an unregistered worker: %v, want the last_worker_id foreign key error", err)
	}
}

func TestPgflowMapSteps(t *testing.T) {
	t.Parallel()
	forEachLayer(t, func(t *testing.T, f *flowDB) {
		// A root map over the flow input, then a single step that gets the array of outputs.
		f.flow("maps", 3, 1, "map:double", "sum<-double")
		f.register("maps")
		run := f.start("maps", `[1, 2, 3]`)
		tasks := f.poll("maps")
		expectSteps(t, tasks, "double[0]", "double[1]", "double[2]")
		for i, tk := range tasks {
			expectInput(t, tk, fmt.Sprint(i+1)) // the bare element, never the flow input
		}
		// Completed out of order: the dependent still sees task_index order.
		f.complete(tasks[2], `6`)
		f.complete(tasks[0], `2`)
		if more := f.poll("maps"); len(more) != 0 {
			t.Fatalf("sum started before every map task completed: %v", more)
		}
		f.complete(tasks[1], `4`)
		tasks = f.poll("maps")
		expectSteps(t, tasks, "sum[0]")
		expectInput(t, tasks[0], `{"run": [1, 2, 3], "double": [2, 4, 6]}`)
		f.complete(tasks[0], `12`)
		if status, output := f.run(run); status != "completed" || !reflect.DeepEqual(output, jsonValue(t, `{"sum": 12}`)) {
			t.Fatalf("run: %s %v", status, output)
		}

		// A map fed by a single step's array.
		f.flow("fanout", 3, 1, "list", "map:each<-list")
		run = f.start("fanout", `{"k": 1}`)
		tasks = f.poll("fanout")
		expectSteps(t, tasks, "list[0]")
		f.complete(tasks[0], `["x", {"y": 1}]`)
		tasks = f.poll("fanout")
		expectSteps(t, tasks, "each[0]", "each[1]")
		expectInput(t, tasks[0], `"x"`)
		expectInput(t, tasks[1], `{"y": 1}`)
		f.complete(tasks[1], `"B"`)
		f.complete(tasks[0], `"A"`)
		if status, output := f.run(run); status != "completed" || !reflect.DeepEqual(output, jsonValue(t, `{"each": ["A", "B"]}`)) {
			t.Fatalf("run: %s %v; a map leaf's output is the array of its task outputs", status, output)
		}
	})
}

func TestPgflowEmptyMapCompletesAtOnce(t *testing.T) {
	t.Parallel()
	forEachLayer(t, func(t *testing.T, f *flowDB) {
		f.flow("empty", 3, 1, "map:first", "map:second<-first")
		f.register("empty")
		run := f.start("empty", `[]`)
		if tasks := f.poll("empty"); len(tasks) != 0 {
			t.Fatalf("an empty map started tasks: %v", tasks)
		}
		if status, output := f.run(run); status != "completed" || !reflect.DeepEqual(output, jsonValue(t, `{"second": []}`)) {
			t.Fatalf("run over []: %s %v; want completed at once, cascading through both maps", status, output)
		}
	})
}

func TestPgflowNonArrayIntoMapFailsTheRun(t *testing.T) {
	t.Parallel()
	forEachLayer(t, func(t *testing.T, f *flowDB) {
		f.flow("typeviolation", 3, 1, "list", "map:each<-list")
		f.register("typeviolation")
		run := f.start("typeviolation", `{}`)
		tasks := f.poll("typeviolation")
		if n := f.complete(tasks[0], `{"not": "an array"}`); n != 0 {
			t.Fatalf("complete_task returned %d rows, want 0 for a type violation", n)
		}
		if status, _ := f.run(run); status != "failed" {
			t.Fatalf("run status %s, want failed", status)
		}
		var msg string
		f.pool.QueryRow(f.ctx, `SELECT error_message FROM pgflow.step_tasks WHERE run_id = $1::uuid AND step_slug = 'list'`, run).Scan(&msg)
		if !strings.Contains(msg, "TYPE_VIOLATION") {
			t.Fatalf("error message %q, want a [TYPE_VIOLATION]", msg)
		}
	})
}

func TestPgflowFailTaskRetriesThenFailsTheRun(t *testing.T) {
	t.Parallel()
	forEachLayer(t, func(t *testing.T, f *flowDB) {
		f.flow("flaky", 3, 1, "a", "b")
		f.register("flaky")
		run := f.start("flaky", `{}`)
		tasks := f.poll("flaky")
		expectSteps(t, tasks, "a[0]", "b[0]")
		target := tasks[0]
		for attempt := 1; attempt <= 3; attempt++ {
			f.fail(target, fmt.Sprintf("boom %d", attempt))
			var status string
			var attempts int
			var vtIn float64
			err := f.pool.QueryRow(f.ctx, `SELECT st.status, st.attempts_count,
				coalesce(extract(epoch FROM (SELECT vt FROM pgmq.q_flaky WHERE msg_id = st.message_id) - clock_timestamp()), -1)
				FROM pgflow.step_tasks st WHERE st.run_id = $1::uuid AND st.step_slug = 'a'`, run).Scan(&status, &attempts, &vtIn)
			if err != nil {
				t.Fatal(err)
			}
			if attempt < 3 {
				// Retry delay floor(base_delay * 2^attempts_count): 2 s, then 4 s.
				want := float64(int(1) << attempt)
				if status != "queued" || attempts != attempt || vtIn < want-1 || vtIn > want+0.5 {
					t.Fatalf("after failure %d: status %s, attempts %d, visible in %.2fs; want queued, %d, ~%.0fs",
						attempt, status, attempts, vtIn, attempt, want)
				}
				if again := f.poll("flaky"); len(again) != 0 {
					t.Fatalf("a retried task was visible before its delay: %v", again)
				}
				// Skip the wait: make the message visible now and take the task again.
				f.exec(`SELECT pgmq.set_vt('flaky', $1::bigint, 0)`, target.MsgID)
				again := f.poll("flaky")
				expectSteps(t, again, "a[0]")
				target = again[0]
				continue
			}
			if status != "failed" || attempts != 3 {
				t.Fatalf("after the last attempt: status %s, attempts %d; want failed, 3", status, attempts)
			}
		}
		if status, _ := f.run(run); status != "failed" {
			t.Fatalf("run status %s, want failed", status)
		}
		var open int
		f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pgmq.q_flaky`).Scan(&open)
		if open != 0 {
			t.Fatalf("%d messages of the failed run are still in the queue, want all archived", open)
		}
		// The sibling task started before the failure stays started; completing it changes nothing.
		f.complete(tasks[1], `1`)
		if status, _ := f.run(run); status != "failed" {
			t.Fatalf("complete_task on a failed run changed its status to %s", status)
		}
	})
}

type event struct {
	channel string
	body    map[string]any
	raw     string
}

func TestRealtimeEventsFollowARun(t *testing.T) {
	t.Parallel()
	forEachLayer(t, func(t *testing.T, f *flowDB) {
		f.flow("events", 3, 1, "a", "b<-a")
		f.register("events")
		listener, err := pgx.Connect(f.ctx, f.url)
		if err != nil {
			t.Fatal(err)
		}
		defer listener.Close(f.ctx)
		runID := "0b3f0d6e-7a9d-4c1e-9e59-53c0e2b61a42"
		channel := schema.RunChannel(runID)
		if err := schema.ListenEvents(f.ctx, listener, channel); err != nil {
			t.Fatal(err)
		}
		big := `"` + strings.Repeat("x", 20000) + `"`
		f.exec(`SELECT pgflow.start_flow('events', $1::jsonb, $2::uuid)`, `{"secret": `+big+`}`, runID)
		tasks := f.poll("events")
		f.complete(tasks[0], `{"secret": `+big+`}`)
		tasks = f.poll("events")
		f.complete(tasks[0], `{"secret": `+big+`}`)

		var got []event
		for {
			ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
			n, err := listener.WaitForNotification(ctx)
			cancel()
			if err != nil {
				break
			}
			var e event
			e.channel, e.raw = n.Channel, n.Payload
			if err := json.Unmarshal([]byte(n.Payload), &e.body); err != nil {
				t.Fatalf("payload is not JSON: %q", n.Payload)
			}
			got = append(got, e)
			if e.body["event"] == "run:completed" {
				break
			}
		}
		var names []string
		for _, e := range got {
			names = append(names, fmt.Sprint(e.body["event"]))
			if e.channel != channel || e.body["run_id"] != runID {
				t.Fatalf("event on %s for run %v, want %s / %s", e.channel, e.body["run_id"], channel, runID)
			}
			if strings.Contains(e.raw, "secret") || e.body["output"] != nil || len(e.raw) > 1000 {
				t.Fatalf("an event carries output or is large (%d bytes): %.200s", len(e.raw), e.raw)
			}
		}
		want := []string{"run:started", "step:a:started", "step:a:completed", "step:b:started", "step:b:completed", "run:completed"}
		if !reflect.DeepEqual(names, want) {
			t.Fatalf("events %v, want %v", names, want)
		}
		last := got[len(got)-1].body
		if last["status"] != "completed" || last["flow_slug"] != "events" {
			t.Fatalf("run:completed event %v", last)
		}
		if got[2].body["step_slug"] != "a" || got[2].body["status"] != "completed" {
			t.Fatalf("step:a:completed event %v", got[2].body)
		}
	})
}
