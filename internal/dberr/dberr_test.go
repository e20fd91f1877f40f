package dberr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dberr"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("writing: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	for _, c := range []struct {
		err  error
		want dberr.Class
	}{
		{nil, dberr.ClassNone},
		{pg("53100"), dberr.ClassTransient}, // disk full
		{pg("53200"), dberr.ClassTransient}, // out of memory
		{pg("53300"), dberr.ClassTransient}, // too many connections
		{pg("57P01"), dberr.ClassTransient}, // admin shutdown
		{pg("57P03"), dberr.ClassTransient}, // cannot connect now
		{pg("08006"), dberr.ClassTransient}, // connection failure
		{pg("40001"), dberr.ClassTransient},
		{pg("40P01"), dberr.ClassTransient},
		{pg("55P03"), dberr.ClassTransient},
		{pg("25006"), dberr.ClassTransient}, // read-only after a failover
		{pg("57014"), dberr.ClassTransient}, // our statement timeout
		{pg("22P05"), dberr.ClassVerdict},   // \u0000 in jsonb
		{pg("23505"), dberr.ClassVerdict},
		{pg("P0001"), dberr.ClassVerdict}, // pgflow's RAISE
		{pg("42P01"), dberr.ClassOurs},    // undefined table
		{pg("42883"), dberr.ClassOurs},    // undefined function
		{io.ErrUnexpectedEOF, dberr.ClassTransient},
		{context.Canceled, dberr.ClassCanceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), dberr.ClassCanceled},
		{errors.New("something else"), dberr.ClassOurs},
	} {
		if got := dberr.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	if got := dberr.Describe(pg("53100")); got != "insufficient resources (disk full, out of memory, too many connections) (53100)" {
		t.Errorf("Describe(53100) = %q", got)
	}
}

// The errors a pgflow upgraded under the worker causes make it look at the catalogue; a
// verdict, a transient error or no SQLSTATE does not. None of them is a verdict that would
// fail a task.
func TestSchemaChanged(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("fetching: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{pg("42804"), true}, // a twin's result no longer matches step_task_record
		{pg("42883"), true}, // start_tasks lost a signature
		{pg("42P01"), true},
		{pg("42703"), true},
		{pg("55000"), true}, // a stale twin of start_tasks
		{fmt.Errorf("reading: %w", dberr.ErrSchemaChanged), true},
		{pg("23505"), false},
		{pg("40P01"), false},
		{io.EOF, false},
		{nil, false},
	} {
		if got := dberr.SchemaChanged(c.err); got != c.want {
			t.Errorf("SchemaChanged(%v) = %v, want %v", c.err, got, c.want)
		}
		if c.want && dberr.Verdict(c.err) {
			t.Errorf("%v is a verdict: an outcome write meeting it would fail its task", c.err)
		}
	}
}
