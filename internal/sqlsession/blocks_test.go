package sqlsession_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
)

func raw(t *testing.T, s interface {
	Query(context.Context, []byte) ([]byte, error)
}, req string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Query(ctx, []byte(req))
	return string(out), err
}

// A statement sent with "savepoint" in a transactional step fails alone: its error reaches
// the guest, the task's transaction goes on, and what came before and after it is kept.
// Without "savepoint" a failure still aborts the transaction (older guests).
func TestAStatementInItsOwnSavepointFailsAlone(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	s := a.grant(true).Begin(time.Now().Add(time.Minute))
	defer s.Close()
	// The first statement of the task: the transaction and the savepoint begin together.
	_, err := raw(t, s, `{"sql": "insert into app.ledger values ($1, 0, 1)", "params": ["not a uuid"], "savepoint": true}`)
	expectCode(t, err, abi.ErrSQLFailed, "22P02")
	if _, err := raw(t, s, `{"sql": "insert into app.ledger values (gen_random_uuid(), 0, 1)", "savepoint": true}`); err != nil {
		t.Fatal(err)
	}
	_, err = raw(t, s, `{"sql": "select 1 / 0", "savepoint": true}`)
	expectCode(t, err, abi.ErrSQLFailed, "22012")
	out, err := raw(t, s, `{"sql": "select count(*) from app.ledger", "savepoint": true}`)
	if err != nil || out != `{"columns":["count"],"rows":[[1]],"row_count":1,"command":"SELECT 1"}` {
		t.Fatalf("after two failures: %s, %v", out, err)
	}
	if !s.Open() || s.Failed() != nil {
		t.Fatalf("open %v, failed %v: the transaction should be open and not aborted", s.Open(), s.Failed())
	}
}

// The guest's blocks: in a non-transactional step the outermost is a real transaction
// (nothing is seen outside before its commit, nothing after its rollback), inner ones are
// savepoints; a block whose statement failed cannot commit; a commit with no block is refused.
func TestTransactionRequests(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	s := a.grant(false).Begin(time.Now().Add(time.Minute))
	defer s.Close()
	must := func(req, want string) {
		t.Helper()
		out, err := raw(t, s, req)
		if err != nil || (want != "" && out != want) {
			t.Fatalf("%s: %s, %v (want %s)", req, out, err, want)
		}
	}
	const ins = `{"sql": "insert into app.ledger values (gen_random_uuid(), 0, 1)"}`
	seen := func() int { return count(t, a.db.Pool, "select count(*) from app.ledger") }
	must(`{"tx": "begin"}`, `{"columns":[],"rows":[],"row_count":0,"command":"BEGIN"}`)
	must(ins, "")
	must(`{"tx": "begin"}`, `{"columns":[],"rows":[],"row_count":0,"command":"SAVEPOINT"}`)
	must(ins, "")
	must(`{"tx": "rollback"}`, `{"columns":[],"rows":[],"row_count":0,"command":"ROLLBACK"}`)
	if n := seen(); n != 0 {
		t.Fatalf("%d rows seen before the commit", n)
	}
	must(`{"tx": "commit"}`, `{"columns":[],"rows":[],"row_count":0,"command":"COMMIT"}`)
	if n := seen(); n != 1 {
		t.Fatalf("%d rows after the commit, want 1 (the savepoint's was rolled back)", n)
	}
	must(`{"tx": "begin"}`, "")
	must(ins, "")
	_, err := raw(t, s, `{"sql": "select 1 / 0"}`)
	expectCode(t, err, abi.ErrSQLFailed, "22012")
	_, err = raw(t, s, ins)
	expectCode(t, err, abi.ErrSQLFailed, "25P02")
	_, err = raw(t, s, `{"tx": "commit"}`)
	expectCode(t, err, abi.ErrSQLFailed, "25P02", "rolled back, not committed", "SQLSTATE 22012: division by zero")
	if n := seen(); n != 1 {
		t.Fatalf("%d rows after the failed block, want 1", n)
	}
	_, err = raw(t, s, `{"tx": "commit"}`)
	expectCode(t, err, abi.ErrBadRequest, "", "no open block")
	_, err = raw(t, s, `{"tx": "begin", "sql": "begin"}`)
	expectCode(t, err, abi.ErrBadRequest, "", "the host writes the transaction's statements")
	// Statements on their own commit again.
	must(ins, "")
	if n := seen(); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
	// A block left open when the task ends is rolled back.
	must(`{"tx": "begin"}`, "")
	must(ins, "")
	s.Close()
	if n := seen(); n != 2 {
		t.Fatalf("%d rows after a block left open, want 2", n)
	}
}

// A typed result carries each column's type OID and every value as PostgreSQL's text.
func TestATypedResultKeepsTheText(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	s := a.grant(false).Begin(time.Now().Add(time.Minute))
	defer s.Close()
	out, err := raw(t, s, `{"sql": "select 9007199254740993::int8 as i, array['a b', null] as a, null::text as n, $1 as d",
		"params": ["2024-01-02T03:04:05Z"], "param_types": [1082], "typed": true}`)
	if err != nil || out != `{"columns":["i","a","n","d"],"types":[20,1009,25,1082],"rows":[["9007199254740993","{\"a b\",NULL}",null,"2024-01-02"]],"row_count":1,"command":"SELECT 1"}` {
		t.Fatalf("%s, %v", out, err)
	}
}

// A transactional task whose handler returns with a block still open is not completed in
// its transaction: nothing it wrote is kept, and the error says to await sql.begin.
func TestATaskWithAnOpenBlockDoesNotComplete(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	s := a.grant(true).Begin(time.Now().Add(time.Minute))
	defer s.Close()
	for _, req := range []string{`{"sql": "insert into app.ledger values (gen_random_uuid(), 0, 1)"}`, `{"tx": "begin"}`,
		`{"sql": "insert into app.ledger values (gen_random_uuid(), 0, 1)"}`} {
		if _, err := raw(t, s, req); err != nil {
			t.Fatalf("%s: %v", req, err)
		}
	}
	_, err := s.Complete(context.Background(), taskwrite.Call{}, "")
	if err == nil || !strings.Contains(err.Error(), "1 sql.begin block(s) of its were still open") {
		t.Fatalf("Complete: %v", err)
	}
	if n := count(t, a.db.Pool, "select count(*) from app.ledger"); n != 0 {
		t.Fatalf("%d rows kept", n)
	}
}
