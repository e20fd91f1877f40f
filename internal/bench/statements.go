package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
)

// Statement is one statement's cost over a measurement, from pg_stat_statements (with
// pg_stat_statements.track = all, so the statements pgflow's functions run are listed
// beside the calls that ran them: Toplevel tells them apart, and a top-level call's time
// includes its nested statements').
type Statement struct {
	Query    string
	Toplevel bool
	Calls    int64
	TotalMS  float64
	Rows     int64
	// PerTaskMS is TotalMS over the measurement's tasks.
	PerTaskMS float64
}

// statementsTop is how many statements a measurement lists (by total time, top-level and
// nested each).
const statementsTop = 12

// resetStatements clears pg_stat_statements before a measurement; it says why when the
// extension cannot be used (then Config.Statements measures nothing).
func (r *runner) resetStatements(ctx context.Context) error {
	if _, err := r.admin.Exec(ctx, `create extension if not exists pg_stat_statements`); err != nil {
		return err
	}
	_, err := r.admin.Exec(ctx, `select pg_stat_statements_reset()`)
	return err
}

// startStatements resets pg_stat_statements for a measurement when Config.Statements asks
// for it, noting in res why it cannot.
func (r *runner) startStatements(ctx context.Context, res *Result) {
	if !r.cfg.Statements {
		return
	}
	if err := r.resetStatements(ctx); err != nil {
		res.StatementsErr = err.Error()
	}
}

// endStatements lists the statements of the measurement startStatements began into res.
func (r *runner) endStatements(ctx context.Context, url string, tasks int, res *Result) {
	if !r.cfg.Statements || res.StatementsErr != "" {
		return
	}
	var err error
	if res.Statements, err = r.readStatements(ctx, databaseName(url), tasks); err != nil {
		res.StatementsErr = err.Error()
	}
}

// readStatements lists the costliest statements run in database db since the reset.
func (r *runner) readStatements(ctx context.Context, db string, tasks int) ([]Statement, error) {
	rows, err := r.admin.Query(ctx, `
		(select query, toplevel, calls, total_exec_time, rows from pg_stat_statements s
		 join pg_database d on d.oid = s.dbid where d.datname = $1 and toplevel order by total_exec_time desc limit $2)
		union all
		(select query, toplevel, calls, total_exec_time, rows from pg_stat_statements s
		 join pg_database d on d.oid = s.dbid where d.datname = $1 and not toplevel order by total_exec_time desc limit $2)`,
		db, statementsTop)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Statement, error) {
		var s Statement
		err := row.Scan(&s.Query, &s.Toplevel, &s.Calls, &s.TotalMS, &s.Rows)
		s.Query = strings.Join(strings.Fields(s.Query), " ")
		if tasks > 0 {
			s.PerTaskMS = s.TotalMS / float64(tasks)
		}
		return s, err
	})
	return out, err
}

func shorten(q string, n int) string {
	q = strings.ReplaceAll(q, "|", "\\|")
	if len(q) <= n {
		return q
	}
	return q[:n-3] + "..."
}

// writeStatements writes the statements of every measurement that listed them.
func (rep *Report) writeStatements(w io.Writer) {
	for _, r := range rep.Results {
		if len(r.Statements) == 0 && r.StatementsErr == "" {
			continue
		}
		fmt.Fprintf(w, "\n#### statements: %s, %s, fsync %s (%d tasks; ms per task = total over tasks)\n\n", r.name(rep.Config.Rounds), r.Shape, r.Fsync, r.Tasks)
		if r.StatementsErr != "" {
			fmt.Fprintf(w, "not measured: %s\n", r.StatementsErr)
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
		fmt.Fprintf(tw, "| level\t calls\t total ms\t ms per task\t rows\t statement\t\n|---\t---\t---\t---\t---\t---\t\n")
		for _, s := range r.Statements {
			level := "nested"
			if s.Toplevel {
				level = "top"
			}
			fmt.Fprintf(tw, "| %s\t %d\t %.1f\t %.3f\t %d\t %s\t\n", level, s.Calls, s.TotalMS, s.PerTaskMS, s.Rows, shorten(s.Query, 110))
		}
		tw.Flush()
	}
}
