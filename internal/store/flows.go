package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Flow is a flow as compiled into the database.
type Flow struct {
	Slug        string
	MaxAttempts int
	BaseDelay   int
	Timeout     int
	CreatedAt   time.Time
	Steps       []FlowStep
	// Counts is how many runs started in the window given to Flows are in each status.
	Counts map[string]int
}

// FlowStep is a step's definition. Options are nil when the step inherits the flow's.
type FlowStep struct {
	Slug        string
	Type        string
	Index       int
	DependsOn   []string
	MaxAttempts *int
	BaseDelay   *int
	Timeout     *int
	StartDelay  *int
	// Conditions (pgflow 0.14+, schema.Protocol.Conditions; empty before): the jsonb patterns and the two policies.
	RequiredInput  string
	ForbiddenInput string
	WhenUnmet      string
	WhenExhausted  string
}

// Flows reads every flow with its steps, and counts its runs by status over the last window.
func (s *Store) Flows(ctx context.Context, window time.Duration) ([]Flow, error) {
	rows, err := s.pool.Query(ctx, `select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, created_at
		from pgflow.flows order by flow_slug`)
	if err != nil {
		return nil, err
	}
	flows, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Flow, error) {
		f := Flow{Counts: map[string]int{}}
		err := row.Scan(&f.Slug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout, &f.CreatedAt)
		return f, err
	})
	if err != nil {
		return nil, err
	}
	byFlow := map[string]*Flow{}
	for i := range flows {
		byFlow[flows[i].Slug] = &flows[i]
	}

	cond := "'', '', '', ''"
	if s.proto.Conditions {
		cond = "coalesce(s.required_input_pattern::text, ''), coalesce(s.forbidden_input_pattern::text, ''), coalesce(s.when_unmet, ''), coalesce(s.when_exhausted, '')"
	}
	rows, err = s.pool.Query(ctx, `select s.flow_slug, s.step_slug, s.step_type, s.step_index,
		       coalesce((select array_agg(d.dep_slug order by d.dep_slug) from pgflow.deps d
		                 where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '{}'),
		       s.opt_max_attempts, s.opt_base_delay, s.opt_timeout, s.opt_start_delay, `+cond+`
		from pgflow.steps s order by s.flow_slug, s.step_index`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var flow string
		var st FlowStep
		if err := rows.Scan(&flow, &st.Slug, &st.Type, &st.Index, &st.DependsOn, &st.MaxAttempts, &st.BaseDelay,
			&st.Timeout, &st.StartDelay, &st.RequiredInput, &st.ForbiddenInput, &st.WhenUnmet, &st.WhenExhausted); err != nil {
			return nil, err
		}
		if f := byFlow[flow]; f != nil {
			f.Steps = append(f.Steps, st)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	counts, err := s.RecentCounts(ctx, window)
	if err != nil {
		return nil, err
	}
	for flow, byStatus := range counts {
		if f := byFlow[flow]; f != nil {
			f.Counts = byStatus
		}
	}
	return flows, nil
}

// RecentCounts counts the runs started in the last window, by flow and status.
func (s *Store) RecentCounts(ctx context.Context, window time.Duration) (map[string]map[string]int, error) {
	rows, err := s.pool.Query(ctx, `select flow_slug, status, count(*) from pgflow.runs
		where started_at > clock_timestamp() - $1 * interval '1 second' group by flow_slug, status`, window.Seconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]int{}
	for rows.Next() {
		var flow, status string
		var n int
		if err := rows.Scan(&flow, &status, &n); err != nil {
			return nil, err
		}
		if out[flow] == nil {
			out[flow] = map[string]int{}
		}
		out[flow][status] = n
	}
	return out, rows.Err()
}
