package runs

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tree is a run with its steps and their tasks.
type Tree struct {
	Run   Run
	Steps []StepNode
}

// StepNode is one step's state in a run.
type StepNode struct {
	Slug        string
	Type        string // single or map
	DependsOn   []string
	Status      string // created, started, completed, failed
	StartedAt   *time.Time
	CompletedAt *time.Time
	FailedAt    *time.Time
	Error       string
	Tasks       []TaskNode
}

// TaskNode is one task of a step.
type TaskNode struct {
	Index       int
	Status      string // queued, started, completed, failed
	Attempts    int
	Error       string
	QueuedAt    time.Time
	StartedAt   *time.Time
	CompletedAt *time.Time
	FailedAt    *time.Time
	WorkerID    string
}

// GetTree reads a run, its steps (in flow order) and every task.
func GetTree(ctx context.Context, pool *pgxpool.Pool, id string) (*Tree, error) {
	r, err := Get(ctx, pool, id)
	if err != nil {
		return nil, err
	}
	t := &Tree{Run: *r}
	rows, err := pool.Query(ctx, `
		select s.step_slug, s.step_type,
		       coalesce((select array_agg(d.dep_slug order by d.dep_slug) from pgflow.deps d
		                 where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '{}'),
		       ss.status, ss.started_at, ss.completed_at, ss.failed_at, coalesce(ss.error_message, '')
		from pgflow.step_states ss
		join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
		where ss.run_id = $1::uuid order by s.step_index`, id)
	if err != nil {
		return nil, err
	}
	t.Steps, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (StepNode, error) {
		var s StepNode
		err := row.Scan(&s.Slug, &s.Type, &s.DependsOn, &s.Status, &s.StartedAt, &s.CompletedAt, &s.FailedAt, &s.Error)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `
		select step_slug, task_index, status, attempts_count, coalesce(error_message, ''), queued_at, started_at,
		       completed_at, failed_at, coalesce(last_worker_id::text, '')
		from pgflow.step_tasks where run_id = $1::uuid order by step_slug, task_index`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byStep := map[string]*StepNode{}
	for i := range t.Steps {
		byStep[t.Steps[i].Slug] = &t.Steps[i]
	}
	for rows.Next() {
		var slug string
		var k TaskNode
		if err := rows.Scan(&slug, &k.Index, &k.Status, &k.Attempts, &k.Error, &k.QueuedAt, &k.StartedAt,
			&k.CompletedAt, &k.FailedAt, &k.WorkerID); err != nil {
			return nil, err
		}
		if s := byStep[slug]; s != nil {
			s.Tasks = append(s.Tasks, k)
		}
	}
	return t, rows.Err()
}

// Render writes the tree for a terminal. maxTasks bounds the tasks listed per step (0 = all);
// the others are summarised by status.
func (t *Tree) Render(w io.Writer, maxTasks int) {
	r := t.Run
	fmt.Fprintf(w, "run %s  flow %s  %s  %s\n", r.ID, r.Flow, r.Status, span(&r.StartedAt, r.CompletedAt, r.FailedAt))
	fmt.Fprintf(w, "  input:  %s\n", abbreviate(string(r.Input), 200))
	if r.Status == "completed" {
		fmt.Fprintf(w, "  output: %s\n", abbreviate(string(r.Output), 200))
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error:  %s\n", r.Error)
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
			fmt.Fprintf(w, "%s   error: %s\n", indent, s.Error)
		}
		shown := s.Tasks
		if maxTasks > 0 && len(shown) > maxTasks {
			shown = shown[:maxTasks]
		}
		for j, k := range shown {
			tb := "├─ "
			if j == len(shown)-1 && len(shown) == len(s.Tasks) {
				tb = "└─ "
			}
			line := fmt.Sprintf("%s%s[%d] %s  attempt %d  %s", indent, tb, k.Index, k.Status, k.Attempts, span(k.StartedAt, k.CompletedAt, k.FailedAt))
			if k.Error != "" {
				line += "  error: " + abbreviate(k.Error, 160)
			}
			fmt.Fprintln(w, strings.TrimRight(line, " "))
		}
		if rest := s.Tasks[len(shown):]; len(rest) > 0 {
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

func round(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
