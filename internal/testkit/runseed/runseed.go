// Package runseed fills a database with many finished runs fast, for tests and benchmarks
// of what reads or deletes old runs: it copies real finished runs (run by a worker first)
// with set-based INSERTs into pgflow's tables, under new run ids and moved back in time,
// with their tasks' archived queue messages and pgflow-wasm's attempt history.
//
// Copying every column of real rows, rather than writing rows by hand, keeps the copies
// valid on every pgflow release whatever columns and checks its tables have.
package runseed

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Options says what to copy.
type Options struct {
	Templates []string      // finished runs to copy, in turn (copy i is of Templates[i % len])
	Copies    int           // how many runs to make
	Age       time.Duration // how far back every timestamp of a copy is moved
	// Chunk is how many runs one INSERT statement copies [100,000]: bounds one
	// transaction's size on a big seed.
	Chunk int
}

// Seed makes opts.Copies runs and returns how many it made (fewer when it fails midway).
func Seed(ctx context.Context, pool *pgxpool.Pool, opts Options) (int, error) {
	if len(opts.Templates) == 0 || opts.Copies <= 0 {
		return 0, fmt.Errorf("runseed: give templates and a positive number of copies")
	}
	if opts.Chunk <= 0 {
		opts.Chunk = 100_000
	}
	queueCol := "flow_slug"
	proto, err := schema.DetectPgflow(ctx, pool)
	if err != nil {
		return 0, err
	}
	if proto.QueueNames {
		queueCol = "queue_name"
	}
	var queues []string
	rows, err := pool.Query(ctx, `select distinct `+queueCol+` from pgflow.step_tasks where run_id = any($1::uuid[])`, opts.Templates)
	if err != nil {
		return 0, err
	}
	if queues, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return 0, err
	}
	made := 0
	for made < opts.Copies {
		n := min(opts.Chunk, opts.Copies-made)
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return seedChunk(ctx, tx, opts, queueCol, queues, made, n)
		}); err != nil {
			return made, err
		}
		made += n
	}
	return made, nil
}

func seedChunk(ctx context.Context, tx pgx.Tx, opts Options, queueCol string, queues []string, from, n int) error {
	// The copy's id is drawn afresh; m maps each copy to its template.
	if _, err := tx.Exec(ctx, `create temp table runseed_map on commit drop as
		select gen_random_uuid() as new_id, ($1::uuid[])[1 + (g % cardinality($1::uuid[]))] as tmpl
		from generate_series($2::bigint, $3::bigint) g`, opts.Templates, from, from+n-1); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `create index on runseed_map (tmpl); analyze runseed_map`); err != nil {
		return err
	}
	age := fmt.Sprintf("interval '%d seconds'", int64(opts.Age.Seconds()))
	copyTable := func(table string, special map[string]string) error {
		cols, exprs, err := columns(ctx, tx, table, age, special)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `insert into `+table+` (`+cols+`) select `+exprs+`
			from `+table+` t join runseed_map m on t.run_id = m.tmpl`)
		return err
	}
	if err := copyTable("pgflow.runs", nil); err != nil {
		return err
	}
	if err := copyTable("pgflow.step_states", nil); err != nil {
		return err
	}
	// A task's message id comes from its queue's own sequence, so a copy's never collides
	// with a message the queue sends later.
	for _, q := range queues {
		seq := fmt.Sprintf("nextval(pg_get_serial_sequence('%s', 'msg_id'))", strings.ReplaceAll(schema.QueueTable(q), "'", "''"))
		cols, exprs, err := columns(ctx, tx, "pgflow.step_tasks", age, map[string]string{
			"message_id": "case when t.message_id is null then null else " + seq + " end"})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `insert into pgflow.step_tasks (`+cols+`) select `+exprs+`
			from pgflow.step_tasks t join runseed_map m on t.run_id = m.tmpl where t.`+queueCol+` = $1`, q); err != nil {
			return err
		}
		var archive bool
		if err := tx.QueryRow(ctx, `select to_regclass($1) is not null`, schema.ArchiveTable(q)).Scan(&archive); err != nil {
			return err
		}
		if !archive {
			continue
		}
		acols, aexprs, err := columnsOf(ctx, tx, "pgmq", strings.TrimPrefix(schema.ArchiveTable(q), `"pgmq".`), "a", age, map[string]string{
			"msg_id":  "nt.message_id",
			"message": "a.message || jsonb_build_object('run_id', m.new_id::text)"})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `insert into `+schema.ArchiveTable(q)+` (`+acols+`) select `+aexprs+`
			from runseed_map m
			join pgflow.step_tasks nt on nt.run_id = m.new_id
			join pgflow.step_tasks tt on tt.run_id = m.tmpl and tt.step_slug = nt.step_slug and tt.task_index = nt.task_index
			join `+schema.ArchiveTable(q)+` a on a.msg_id = tt.message_id
			where nt.`+queueCol+` = $1`, q); err != nil {
			return err
		}
	}
	var attempts bool
	if err := tx.QueryRow(ctx, `select to_regclass('pgflow_wasm.task_attempts') is not null`).Scan(&attempts); err != nil || !attempts {
		return err
	}
	return copyTable("pgflow_wasm.task_attempts", nil)
}

// columns is the column list of table (schema.name) and the select list that copies a row
// t of it for the copy m: run_id becomes m.new_id, timestamps move back by age, special
// columns take the expression given; identity and generated columns are left to the table.
func columns(ctx context.Context, tx pgx.Tx, table, age string, special map[string]string) (string, string, error) {
	schemaName, name, _ := strings.Cut(table, ".")
	return columnsOf(ctx, tx, schemaName, name, "t", age, special)
}

func columnsOf(ctx context.Context, tx pgx.Tx, schemaName, name, alias, age string, special map[string]string) (string, string, error) {
	rows, err := tx.Query(ctx, `select column_name, data_type from information_schema.columns
		where table_schema = $1 and table_name = $2 and is_identity = 'NO' and is_generated = 'NEVER'
		order by ordinal_position`, schemaName, strings.Trim(name, `"`))
	if err != nil {
		return "", "", err
	}
	type col struct{ name, typ string }
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		err := r.Scan(&c.name, &c.typ)
		return c, err
	})
	if err != nil {
		return "", "", err
	}
	if len(cs) == 0 {
		return "", "", fmt.Errorf("runseed: no table %s.%s", schemaName, name)
	}
	var names, exprs []string
	for _, c := range cs {
		q := pgx.Identifier{c.name}.Sanitize()
		names = append(names, q)
		switch {
		case special[c.name] != "":
			exprs = append(exprs, special[c.name])
		case c.name == "run_id":
			exprs = append(exprs, "m.new_id")
		case c.typ == "timestamp with time zone":
			exprs = append(exprs, alias+"."+q+" - "+age)
		default:
			exprs = append(exprs, alias+"."+q)
		}
	}
	return strings.Join(names, ", "), strings.Join(exprs, ", "), nil
}
