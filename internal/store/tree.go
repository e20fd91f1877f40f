package store

import (
	"context"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
	"io"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
)

// Tree is a run with its steps and all their tasks (Step.Tasks), for a terminal.
type Tree struct {
	Run   pgflowtype.Run
	Steps []Step
}

// Attempt is one failed attempt of a task, kept by pgflow-wasm when it wrote the failure.
type Attempt struct {
	Attempt   int
	WorkerID  string
	StartedAt *time.Time
	FailedAt  time.Time
	Error     string
}

// TreeOptions choose what GetTreeWith reads besides states.
type TreeOptions struct {
	// Outputs reads every task's output, whole (a map step's can be many and large).
	Outputs bool
}

// GetTree reads a run, its steps (in flow order) and every task with its earlier attempts.
func (s *Store) GetTree(ctx context.Context, id string) (*Tree, error) {
	return s.GetTreeWith(ctx, id, TreeOptions{})
}

// GetTreeWith is GetTree with options.
func (s *Store) GetTreeWith(ctx context.Context, id string, opts TreeOptions) (*Tree, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	t := &Tree{Run: *r}
	if t.Steps, err = s.Steps(ctx, r.ID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		select step_slug, task_index, status, attempts_count, coalesce(error_message, ''), queued_at, started_at,
		       completed_at, failed_at, coalesce(last_worker_id::text, ''), case when $2 then output::text end
		from pgflow.step_tasks where run_id = $1::uuid order by step_slug, task_index`, r.ID, opts.Outputs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byStep := map[string]*Step{}
	for i := range t.Steps {
		byStep[t.Steps[i].Slug] = &t.Steps[i]
	}
	for rows.Next() {
		var slug string
		var k Task
		var output *string
		if err := rows.Scan(&slug, &k.Index, &k.Status, &k.Attempts, &k.Error, &k.QueuedAt, &k.StartedAt,
			&k.CompletedAt, &k.FailedAt, &k.WorkerID, &output); err != nil {
			return nil, err
		}
		k.Input, k.Output = JSON{Null: true}, toJSON(output, nil)
		if st := byStep[slug]; st != nil {
			st.Tasks = append(st.Tasks, k)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return t, s.readEarlierAttempts(ctx, t)
}

// readEarlierAttempts fills each task's Earlier from pgflow-wasm's attempt history, when the
// database has one: the attempts before the task's current attempts_count.
func (s *Store) readEarlierAttempts(ctx context.Context, t *Tree) error {
	rows, err := s.pool.Query(ctx, `
		select a.step_slug, a.task_index, a.attempt, coalesce(a.worker_id::text, ''), a.started_at, a.failed_at,
		       coalesce(a.error_message, '')
		from pgflow_wasm.task_attempts a
		join pgflow.step_tasks st on st.run_id = a.run_id and st.step_slug = a.step_slug and st.task_index = a.task_index
		where a.run_id = $1::uuid and a.attempt < st.attempts_count
		order by a.step_slug, a.task_index, a.attempt`, t.Run.ID)
	if err != nil {
		if dberr.UndefinedTable(err) {
			return nil // a database no pgflow-wasm worker has served: no history
		}
		return err
	}
	defer rows.Close()
	tasks := map[string]*Task{}
	for i := range t.Steps {
		for j := range t.Steps[i].Tasks {
			k := &t.Steps[i].Tasks[j]
			tasks[fmt.Sprintf("%s/%d", t.Steps[i].Slug, k.Index)] = k
		}
	}
	for rows.Next() {
		var step string
		var idx int
		var a Attempt
		if err := rows.Scan(&step, &idx, &a.Attempt, &a.WorkerID, &a.StartedAt, &a.FailedAt, &a.Error); err != nil {
			return err
		}
		if k := tasks[fmt.Sprintf("%s/%d", step, idx)]; k != nil {
			k.Earlier = append(k.Earlier, a)
		}
	}
	return rows.Err()
}

// Render writes the tree for a terminal. maxTasks bounds the tasks listed per step (0 = all);
// the others are summarised by status.
func (t *Tree) Render(w io.Writer, maxTasks int) {
	t.RenderWith(w, RenderOptions{MaxTasks: maxTasks})
}

// RenderOptions choose what RenderWith shows.
type RenderOptions struct {
	MaxTasks int  // tasks listed per step (0 = all); the others are summarised by status
	Outputs  bool // each task's output (read with TreeOptions.Outputs)
}

// Lines of a task's error or output shown unless every task is listed (MaxTasks 0).
const shortLines = 6

// RenderWith writes the tree for a terminal. Multi-line errors and outputs keep the
// tree's lines on their left.
func (t *Tree) RenderWith(w io.Writer, o RenderOptions) {
	r := t.Run
	fmt.Fprintf(w, "run %s  flow %s  %s  %s\n", r.ID, r.Flow, r.Status, span(&r.StartedAt, r.CompletedAt, r.FailedAt))
	fmt.Fprintf(w, "  input:  %s\n", abbreviate(string(r.Input), 200))
	if r.Status == "completed" {
		fmt.Fprintf(w, "  output: %s\n", abbreviate(string(r.Output), 200))
	}
	if r.Error != "" {
		block(w, "  ", "error:  ", r.Error, 0)
	}
	for i, s := range t.Steps {
		last := i == len(t.Steps)-1
		branch, indent := "├─ ", "│  "
		if last {
			branch, indent = "└─ ", "   "
		}
		deps := ""
		if len(s.DependsOn) > 0 {
			deps = "  after " + strings.Join(s.DependsOn, ", ")
		}
		fmt.Fprintf(w, "%s%s  %s  %s  %s%s\n", branch, s.Slug, s.Type, s.Status, span(s.StartedAt, s.CompletedAt, s.FailedAt), deps)
		if s.Error != "" {
			block(w, indent+"   ", "error: ", s.Error, 0)
		}
		if s.Status == "skipped" {
			fmt.Fprintf(w, "%s   why: %s\n", indent, t.whySkipped(&s))
		}
		shown := s.Tasks
		if o.MaxTasks > 0 && len(shown) > o.MaxTasks {
			shown = shown[:o.MaxTasks]
		}
		more := len(shown) < len(s.Tasks)
		maxLines := shortLines
		if o.MaxTasks == 0 {
			maxLines = 0
		}
		for j, k := range shown {
			tb, under := "├─ ", "│  "
			if j == len(shown)-1 && !more {
				tb, under = "└─ ", "   "
			}
			line := fmt.Sprintf("%s%s[%d] %s  attempt %d  %s", indent, tb, k.Index, k.Status, k.Attempts, span(k.StartedAt, k.CompletedAt, k.FailedAt))
			fmt.Fprintln(w, strings.TrimRight(line, " "))
			for _, a := range k.Earlier {
				block(w, indent+under+"   ", fmt.Sprintf("attempt %d failed (%s, worker %s): ", a.Attempt,
					span(a.StartedAt, nil, &a.FailedAt), shortID(a.WorkerID)), a.Error, maxLines)
			}
			if k.Error != "" {
				block(w, indent+under+"   ", "error: ", k.Error, maxLines)
			}
			if o.Outputs && !k.Output.Null {
				block(w, indent+under+"   ", "output: ", k.Output.Text, maxLines)
			}
		}
		if more {
			rest := s.Tasks[len(shown):]
			counts := map[string]int{}
			var order []string
			for _, k := range rest {
				if counts[k.Status] == 0 {
					order = append(order, k.Status)
				}
				counts[k.Status]++
			}
			var parts []string
			for _, st := range order {
				parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
			}
			fmt.Fprintf(w, "%s└─ ... %d more tasks (%s); --all lists them\n", indent, len(rest), strings.Join(parts, ", "))
		}
	}
}

// block writes a labelled text under prefix: its first line after the label, the others
// aligned under the first, so the tree's lines stay intact. maxLines > 0 cuts longer texts
// (and very long lines), saying how much was left out.
func block(w io.Writer, prefix, label, text string, maxLines int) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	cut := 0
	if maxLines > 0 && len(lines) > maxLines {
		cut = len(lines) - maxLines
		lines = lines[:maxLines]
	}
	pad := strings.Repeat(" ", len(label))
	for i, l := range lines {
		l = strings.TrimRight(l, "\r")
		if maxLines > 0 {
			l = abbreviate(l, 300)
		}
		if i == 0 {
			fmt.Fprintf(w, "%s%s%s\n", prefix, label, l)
		} else {
			fmt.Fprintf(w, "%s%s%s\n", prefix, pad, l)
		}
	}
	if cut > 0 {
		fmt.Fprintf(w, "%s%s... %d more lines (--all shows everything)\n", prefix, pad, cut)
	}
}

// span formats a start time and how long something took (or has been running).
func span(start, completed, failed *time.Time) string {
	if start == nil {
		return ""
	}
	end := completed
	if end == nil {
		end = failed
	}
	if end == nil {
		return fmt.Sprintf("started %s, running %s", start.Local().Format("15:04:05.000"), round(time.Since(*start)))
	}
	return fmt.Sprintf("started %s, took %s", start.Local().Format("15:04:05.000"), round(end.Sub(*start)))
}

// shortID is a uuid's first group: enough to tell workers apart on a terminal.
func shortID(id string) string {
	if i := strings.IndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

func round(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// whySkipped says in words why pgflow skipped a step (step_states.skip_reason, 0.14+).
func (t *Tree) whySkipped(s *Step) string {
	switch s.SkipReason {
	case "condition_unmet":
		return "its condition (if / if_not in flows.yaml) did not match, and when_unmet says skip"
	case "handler_failed":
		return "its handler failed its last attempt, and when_exhausted says skip: the run went on without it"
	case "dependency_skipped":
		var skipped []string
		for _, d := range s.DependsOn {
			for _, o := range t.Steps {
				if o.Slug == d && o.Status == "skipped" {
					skipped = append(skipped, o.Slug)
				}
			}
		}
		if len(skipped) == 0 {
			return "a step it depends on was skipped, with skip-cascade"
		}
		return "it depends on " + strings.Join(skipped, ", ") + ", which was skipped with skip-cascade"
	case "":
		return "pgflow recorded no reason"
	}
	return "pgflow's reason: " + s.SkipReason
}
