// Package sqlsession runs the SQL of step handlers (the ABI's sql_query) against
// PostgreSQL, for the worker: one Session per task, under the step's role, within limits.
//
// The wall is the database's own privileges: a step's statements run on connections
// logged in as the step's role itself (Grant.DB, a pool of RolePoolConfig), never on a
// session of the worker's login. A statement can then act only as the role, or as a role
// the role is itself a member of: no function, string-running built-in or rule can switch
// to the worker's login or another step's role, because the session never had their
// rights. CheckRole refuses a role that would be no wall (the login itself, a member of
// it, a superuser, BYPASSRLS, CREATEROLE) unless the step allows it.
//
// Second walls, in front of and behind each statement:
//
//   - the statement filter (sandbox/sqlcap.Check) before anything is sent;
//   - the extended protocol: the statement is parsed alone (PostgreSQL refuses a second one
//     in a Parse), its parameters travel apart from its text and are never interpolated;
//   - after each statement, in the same transaction and round trip, current_user,
//     current_setting('role') and session_user are read back: a statement that changed
//     them ends the task, its connection is closed so its transaction rolls back, and no
//     row of it reaches the guest;
//   - each transaction starts with RESET ALL, and a connection goes back to its pool only
//     after DISCARD ALL (temporary tables, advisory locks, prepared statements, LISTENs,
//     settings): nothing a task left on a session reaches the next task.
//
// A transactional step (the pgflow database) runs all of a task's statements in one
// transaction T on one connection, and Complete writes the task's completion inside T
// through schema.StepCompleteFunc, a SECURITY DEFINER function that completes exactly the
// task whose proof (a keyed hash only the worker can make) it is given, before committing:
// the handler's writes and its completion commit together or not at all. Any other step
// runs each statement in a transaction of its own.
package sqlsession

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/sqlcap"
)

// Grant is one step's sql section, resolved: where its statements run and how far.
type Grant struct {
	Where         string // names the step in messages: `step "x" of flow "y" (flows.yaml:12)`
	Role          string // the role statements run as: DB's connections log in as it
	Transactional bool   // one transaction per task, committed with the task's completion
	// StatementTimeout bounds each statement; 0: what is left of the task's timeout (the
	// server's statement_timeout is set half a second later, as a backstop).
	StatementTimeout time.Duration
	MaxRows          int // per result; 0 takes sqlcap.DefaultMaxRows
	MaxResultBytes   int // of one result's JSON; 0 takes sqlcap.DefaultMaxResultBytes
	// DB is a pool on the step's database logged in as Role (RolePoolConfig); nil when the
	// step's database is not configured, and then Unavailable says why.
	DB          *pgxpool.Pool
	Unavailable string
	Observer    Observer // optional

	skipFilter bool // tests only: the database's wall alone (export_test.go)
}

// Observer receives what a step's statements did, for metrics. It never sees a statement's
// text or its parameters.
type Observer interface {
	// Statement reports one request: took is its time in the database, rows the rows it
	// returned or changed, code "" on success, else the SQLSTATE or a reason ("refused",
	// "bad_request", "max_rows", "max_result_bytes", "role_changed", "connection").
	Statement(took time.Duration, rows int, code string)
	// Transaction reports how a transactional task's transaction ended: "committed",
	// "rolled_back" or "unknown" (its COMMIT's answer was lost).
	Transaction(result string)
}

type nopObserver struct{}

func (nopObserver) Statement(time.Duration, int, string) {}
func (nopObserver) Transaction(string)                   {}

func (g *Grant) observer() Observer {
	if g.Observer == nil {
		return nopObserver{}
	}
	return g.Observer
}

func (g *Grant) maxRows() int {
	if g.MaxRows > 0 {
		return g.MaxRows
	}
	return sqlcap.DefaultMaxRows
}

func (g *Grant) maxResultBytes() int {
	if g.MaxResultBytes > 0 {
		return g.MaxResultBytes
	}
	return sqlcap.DefaultMaxResultBytes
}

// Session is one task's use of a Grant. Query is called by the sandbox (one call at a
// time); Complete and Close by the worker once the handler has ended. A Session is safe
// against a Query that comes after Close (a guest the watchdog abandoned): it is refused.
type Session struct {
	g        *Grant
	deadline time.Time // the task's

	mu     sync.Mutex
	conn   *pgxpool.Conn
	inTx   bool          // T has begun (transactional), or a block of the guest's "tx" requests (otherwise)
	failed *sqlcap.Error // transactional: the statement error that aborted T
	closed bool
	user   string // session_user, read when T began
	// levels are the guest's open "tx" blocks (sql.begin), innermost last: SAVEPOINTs, but
	// for a non-transactional step's outermost one, a real transaction.
	levels []level
}

// level is one open block of "tx" requests.
type level struct {
	savepoint string        // "" for a real transaction (BEGIN)
	failed    *sqlcap.Error // a statement in it failed: only its rollback is left
}

// Begin starts a task's session; nothing is sent until the first statement. deadline is
// when the task's timeout runs out.
func (g *Grant) Begin(deadline time.Time) *Session { return &Session{g: g, deadline: deadline} }

// Open reports whether the task's transaction has begun: a transactional step's handler ran
// at least one statement, so its completion must go through Complete.
func (s *Session) Open() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inTx && s.g.Transactional
}

// Failed is the error of the statement that aborted the task's transaction, or nil.
func (s *Session) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		return nil
	}
	return s.failed
}

// statement timeouts and the margin after the task's end during which an idle transaction
// may wait for its completion before the server ends it.
const (
	completionTimeout = 30 * time.Second
	idleMargin        = 30 * time.Second
	deadlineMargin    = 500 * time.Millisecond
)

// begin starts a transaction on the connection: settings reset, the timeouts, standard
// strings (the filter reads backslashes as PostgreSQL then does), then the role.
func (s *Session) queueBegin(b *pgconn.Batch, remaining time.Duration) {
	b.ExecParams("begin", nil, nil, nil, nil)
	b.ExecParams("reset all", nil, nil, nil, nil)
	b.ExecParams(`select set_config('idle_in_transaction_session_timeout', $1, true),
		set_config('standard_conforming_strings', 'on', true), session_user::text`,
		[][]byte{ms(remaining + idleMargin)}, nil, nil, nil)
	b.ExecParams(`select set_config('role', $1, true)`, [][]byte{[]byte(s.g.Role)}, nil, nil, nil)
}

const checkSQL = `select current_user::text, current_setting('role'), session_user::text`

func ms(d time.Duration) []byte {
	return []byte(strconv.FormatInt(max(d.Milliseconds(), 1), 10))
}

// Query runs one request of the guest (sqlcap.Session).
func (s *Session) Query(ctx context.Context, request []byte) ([]byte, error) {
	obs := s.g.observer()
	req, e := sqlcap.ParseRequest(request)
	if e == nil && req.Tx == "" && !s.g.skipFilter {
		e = sqlcap.Check(req.SQL)
	}
	if e != nil {
		obs.Statement(0, 0, e.Reason)
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, &sqlcap.Abort{Reason: "closed", Message: "the task is over: its SQL session is closed"}
	case s.failed != nil:
		obs.Statement(0, 0, "25P02")
		return nil, &sqlcap.Error{Code: abi.ErrSQLFailed, Reason: "sqlstate", SQLState: "25P02", Message: fmt.Sprintf(
			"sql: the task's transaction is aborted: an earlier statement failed (%s); a transactional step's statements "+
				"commit together or not at all", strings.TrimPrefix(s.failed.Message, "sql: "))}
	}
	if s.g.DB == nil {
		obs.Statement(0, 0, "connection")
		return nil, sqlcap.Errorf(abi.ErrSQLFailed, "connection", "%s", s.g.Unavailable)
	}
	if s.conn == nil {
		c, err := s.g.DB.Acquire(ctx)
		if err != nil {
			obs.Statement(0, 0, "connection")
			return nil, sqlcap.Errorf(abi.ErrSQLFailed, "connection", "could not reach the database of %s: %v", s.g.Where, err)
		}
		s.conn = c
	}
	if req.Tx != "" {
		start := time.Now()
		out, err := s.tx(ctx, req.Tx)
		var se *sqlcap.Error
		var ab *sqlcap.Abort
		switch {
		case err == nil:
			obs.Statement(time.Since(start), 0, "")
		case errors.As(err, &se):
			obs.Statement(time.Since(start), 0, codeOf(se))
		case errors.As(err, &ab):
			obs.Statement(time.Since(start), 0, ab.Reason)
		}
		return out, err
	}
	remaining := time.Until(s.deadline)
	// By default the task's deadline ends a statement (the task then fails as any task
	// that runs out of time); the server's own timeout, a little later, is the backstop
	// for a worker that can no longer say so.
	timeout := remaining + deadlineMargin
	if s.g.StatementTimeout > 0 {
		timeout = s.g.StatementTimeout
	}
	b := &pgconn.Batch{}
	beginning := !s.inTx
	l := layout{spAt: -1, stmtAt: 1}
	if beginning {
		s.queueBegin(b, remaining)
		l.stmtAt += 4
	}
	// A statement that asks for it runs in a savepoint of its own when it runs in the task's
	// transaction outside any block (within a block the block is the unit, as in
	// postgres.js): sent in the same round trip, released at once (docs/RATIONALE.md).
	if req.Savepoint && s.g.Transactional && len(s.levels) == 0 {
		l.spAt = l.stmtAt - 1
		l.stmtAt++
		b.ExecParams("savepoint "+stmtSavepoint, nil, nil, nil, nil)
	}
	b.ExecParams(`select set_config('statement_timeout', $1, true)`, [][]byte{ms(timeout)}, nil, nil, nil)
	var oids []uint32
	if len(req.ParamTypes) > 0 {
		oids = make([]uint32, len(req.Params))
		copy(oids, req.ParamTypes)
	}
	b.ExecParams(req.SQL, req.Params, oids, nil, nil)
	b.ExecParams(checkSQL, nil, nil, nil, nil)
	l.total = l.stmtAt + 2
	if l.spAt >= 0 {
		b.ExecParams("release savepoint "+stmtSavepoint, nil, nil, nil, nil)
		l.total++
	}
	l.typed = req.Typed

	start := time.Now()
	res, err := s.run(ctx, b, beginning, l, req.Params)
	took := time.Since(start)
	if err != nil {
		var se *sqlcap.Error
		var ab *sqlcap.Abort
		switch {
		case errors.As(err, &se):
			obs.Statement(took, 0, codeOf(se))
		case errors.As(err, &ab):
			obs.Statement(took, 0, ab.Reason)
		}
		return nil, err
	}
	obs.Statement(took, res.rows, "")
	return res.json, nil
}

func codeOf(e *sqlcap.Error) string {
	if e.SQLState != "" {
		return e.SQLState
	}
	return e.Reason
}

type result struct {
	json []byte
	rows int
}

// stmtSavepoint is the name of a statement's own savepoint (the request's "savepoint").
const stmtSavepoint = "pgflow_statement"

// layout is where the parts of a statement's batch are: its savepoint (-1: none), the
// statement (the role check follows it), and how many commands there are.
type layout struct {
	spAt, stmtAt, total int
	typed               bool
}

// run sends the batch and reads it: the statement's result within the limits, then the
// role check. In a transactional session T stays open; otherwise the statement's
// transaction is committed here.
func (s *Session) run(ctx context.Context, b *pgconn.Batch, beginning bool, l layout, params [][]byte) (result, error) {
	stmtAt := l.stmtAt
	pg := s.conn.Conn().PgConn()
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mrr := pg.ExecBatch(qctx, b)
	var res result
	var check []string
	var abort *sqlcap.Abort
	idx := 0
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		var w *writer
		switch {
		case idx == stmtAt:
			w, abort = s.readRows(rr, l.typed)
			if abort != nil {
				// Stop the statement at once, then drop the connection: its transaction rolls
				// back, and the rows already on the way are never read.
				cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = pg.CancelRequest(cctx)
				ccancel()
				cancel()
				_ = mrr.Close()
				s.discard()
				return result{}, abort
			}
		case idx == stmtAt+1:
			for rr.NextRow() {
				check = make([]string, 0, 3)
				for _, v := range rr.Values() {
					check = append(check, string(v))
				}
			}
		case beginning && idx == 2:
			for rr.NextRow() {
				if v := rr.Values(); len(v) == 3 {
					s.user = string(v[2])
				}
			}
		}
		tag, err := rr.Close()
		if err != nil {
			break
		}
		if w != nil {
			res = result{json: w.finish(tag.RowsAffected(), tag.String()), rows: int(tag.RowsAffected())}
			if max := s.g.maxResultBytes(); len(res.json) > max {
				s.discard()
				return result{}, s.tooLarge()
			}
		}
		idx++
	}
	err := mrr.Close()
	if err == nil && idx != l.total {
		err = fmt.Errorf("the server answered %d of %d commands", idx, l.total)
	}
	if err != nil {
		return result{}, s.failure(ctx, err, beginning, idx, l, params)
	}
	if beginning && s.g.Transactional {
		s.inTx = true
	}
	if len(check) != 3 || check[0] != s.g.Role || check[1] != s.g.Role || check[2] != s.user || s.user != s.g.Role {
		s.discard()
		got := "nothing"
		if len(check) == 3 {
			got = fmt.Sprintf("current_user %q, role %q, session_user %q", check[0], check[1], check[2])
		}
		return result{}, &sqlcap.Abort{Reason: "role_changed", Message: fmt.Sprintf(
			"a statement of %s changed who it runs as (%s, where role %q was set): its transaction is rolled back, "+
				"its connection closed, and none of its rows reached the handler", s.g.Where, got, s.g.Role)}
	}
	if !s.inTx {
		tag, err := pg.Exec(ctx, "commit").ReadAll()
		if err != nil || len(tag) != 1 || tag[0].CommandTag.String() != "COMMIT" {
			s.discard()
			if err == nil {
				err = errors.New("the transaction did not commit")
			}
			return result{}, sqlcap.Errorf(abi.ErrSQLFailed, "connection",
				"the statement's commit failed, so it may or may not have been applied: %v", err)
		}
	}
	return res, nil
}

// failure turns an error of a batch into what the guest gets. A statement error is an
// error code; in a transactional session it also aborts T for good. A lost connection
// in a transaction ends the task: T is gone with it.
func (s *Session) failure(ctx context.Context, err error, beginning bool, idx int, l layout, params [][]byte) error {
	stmtAt := l.stmtAt
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		s.discard()
		block := len(s.levels) > 0
		s.levels = nil
		if !s.g.Transactional {
			s.inTx = false
		}
		if (s.g.Transactional && !beginning || block) && ctx.Err() == nil {
			return &sqlcap.Abort{Reason: "connection", Message: fmt.Sprintf(
				"the connection of %s's transaction was lost (%v): nothing it wrote is kept", s.g.Where, err)}
		}
		return sqlcap.Errorf(abi.ErrSQLFailed, "connection", "the database connection failed: %v", err)
	}
	e := pgError(pe, params)
	switch {
	case idx < stmtAt && beginning && idx == 3:
		e.Message = fmt.Sprintf("sql: cannot set role %q of %s: %s", s.g.Role, s.g.Where, strings.TrimPrefix(e.Message, "sql: "))
	}
	if n := len(s.levels); n > 0 {
		// The innermost block is aborted: PostgreSQL takes no more statements until the
		// guest rolls it back.
		if s.levels[n-1].failed == nil {
			s.levels[n-1].failed = e
		}
		return e
	}
	if l.spAt >= 0 && idx > l.spAt {
		// The statement's own savepoint was set: roll back to it, and T goes on.
		if s.rollbackTo(ctx, stmtSavepoint) == nil {
			s.inTx = true
			return e
		}
	}
	if s.g.Transactional && (s.inTx || beginning) {
		// T is aborted: PostgreSQL takes no more statements in it.
		s.inTx = true
		s.failed = e
		return e
	}
	s.rollback(ctx)
	return e
}

// pgError is PostgreSQL's error as the guest sees it: the message, its hint and its
// SQLSTATE. The detail is left out: it may repeat a value (a key that already exists).
// The message itself may quote a parameter (`invalid input syntax for type uuid: "..."`),
// and it goes on into the task's error and the worker's log: each parameter's text of 4
// bytes or more is replaced by its $n (shorter ones would garble the message, and give
// little away).
func pgError(pe *pgconn.PgError, params [][]byte) *sqlcap.Error {
	msg := pe.Message
	if pe.Hint != "" {
		msg += " (hint: " + pe.Hint + ")"
	}
	for i, p := range params {
		if len(p) >= 4 {
			msg = strings.ReplaceAll(msg, string(p), "$"+strconv.Itoa(i+1))
		}
	}
	return &sqlcap.Error{Code: abi.ErrSQLFailed, Reason: "sqlstate", SQLState: pe.Code,
		Message: fmt.Sprintf("sql: %s (SQLSTATE %s)", msg, pe.Code)}
}

// readRows reads the statement's rows into the result JSON, within the step's limits.
func (s *Session) readRows(rr *pgconn.ResultReader, typed bool) (*writer, *sqlcap.Abort) {
	maxRows, maxBytes := s.g.maxRows(), s.g.maxResultBytes()
	w := newWriter(rr.FieldDescriptions(), typed)
	n := 0
	for rr.NextRow() {
		n++
		if n > maxRows {
			return nil, &sqlcap.Abort{Reason: "max_rows", Message: fmt.Sprintf(
				"a statement of %s returned more than the %d rows of its sql.max_rows: it was cancelled and the task fails "+
					"(page through large results with LIMIT, or raise sql.max_rows)", s.g.Where, maxRows)}
		}
		w.row(rr.Values())
		if w.len() > maxBytes {
			return nil, s.tooLarge()
		}
	}
	return w, nil
}

func (s *Session) tooLarge() *sqlcap.Abort {
	return &sqlcap.Abort{Reason: "max_result_bytes", Message: fmt.Sprintf(
		"the result of a statement of %s is over the %s of its sql.max_result_bytes: it was cancelled and the task fails",
		s.g.Where, bytesize.Text(uint64(s.g.maxResultBytes())))}
}

// rollback ends a statement's failed transaction so the connection can be used again; a
// connection that cannot is closed.
func (s *Session) rollback(ctx context.Context) {
	if s.conn == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.conn.Conn().PgConn().Exec(rctx, "rollback").ReadAll(); err != nil {
		s.discard()
	}
}

// discard closes the connection (the server rolls back what it held open) and drops it,
// with the blocks that were open on it (a transactional task's T stays marked as begun: its
// completion then fails for want of the connection).
func (s *Session) discard() {
	s.levels = nil
	if !s.g.Transactional {
		s.inTx = false
	}
	if s.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = s.conn.Hijack().Close(ctx)
	cancel()
	s.conn = nil
}

// Close ends the session: an open transaction is rolled back, the connection goes back to
// the pool cleaned (release). Later Query calls are refused.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.inTx {
		if s.g.Transactional {
			s.g.observer().Transaction("rolled_back")
		}
		s.rollback(context.Background())
	}
	s.inTx, s.levels = false, nil
	s.release()
}

// release hands the connection back to the pool with nothing of the task left on it:
// DISCARD ALL drops temporary tables, session advisory locks, prepared statements and
// cursors, LISTENs and settings. A connection that cannot be cleaned is closed instead.
func (s *Session) release() {
	if s.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.conn.Conn().PgConn().Exec(ctx, "discard all").ReadAll(); err != nil {
		s.discard()
		return
	}
	s.conn.Release()
	s.conn = nil
}

// Completion is how Complete ended.
type Completion struct {
	// Result is the guarded complete_task's, run inside the task's transaction.
	Result taskwrite.Result
	// Committed: the task's writes and its completion are in the database.
	Committed bool
	// Unknown: COMMIT was sent and its answer lost; the database may or may not have the
	// task completed. The task must be left started for recovery to look at.
	Unknown bool
}

// completeSQL completes one task inside the step's transaction, as the function's owner,
// only with the task's proof (schema/sql/stepcomplete.sql).
const completeSQL = `select picked, status, attempts_count, error_message
	from pgflow_wasm_step.complete_task($1::text::uuid, $2, $3::int, $4::int, $5::jsonb, $6)`

// Complete writes the task's completion inside its transaction and commits both when
// pgflow completed the task; otherwise it rolls back (the result says why: stale, or
// pgflow took the output another way) and the caller writes the outcome without the
// handler's writes. proof is schema.StepProof of the call's task and attempt. An error
// means nothing was committed (Unknown aside). The session is closed afterwards.
func (s *Session) Complete(ctx context.Context, c taskwrite.Call, proof string) (Completion, error) {
	s.mu.Lock()
	defer func() {
		s.closed, s.inTx = true, false
		s.release()
		s.mu.Unlock()
	}()
	obs := s.g.observer()
	switch {
	case !s.inTx || s.closed:
		return Completion{}, errors.New("no transaction to complete the task in")
	case s.failed != nil:
		obs.Transaction("rolled_back")
		s.rollback(ctx)
		return Completion{}, fmt.Errorf("the handler returned an output, but its transaction was aborted by a failed statement (%s): "+
			"nothing it wrote is kept", strings.TrimPrefix(s.failed.Message, "sql: "))
	case len(s.levels) > 0:
		obs.Transaction("rolled_back")
		s.rollback(ctx)
		return Completion{}, fmt.Errorf("the handler returned while %d sql.begin block(s) of its were still open "+
			"(await sql.begin before returning): nothing it wrote is kept", len(s.levels))
	case s.conn == nil:
		obs.Transaction("rolled_back")
		return Completion{}, errors.New("the transaction's connection was lost: nothing the handler wrote is kept")
	}
	pg := s.conn.Conn().PgConn()
	fail := func(err error) (Completion, error) {
		obs.Transaction("rolled_back")
		s.discard()
		return Completion{}, fmt.Errorf("writing the completion in the task's transaction failed, so nothing it wrote is kept: %w", err)
	}
	// Back to the step's own role (a statement may have moved to a role it is a member of),
	// with a bounded time for the write.
	b := &pgconn.Batch{}
	b.ExecParams(`select set_config('role', 'none', true), set_config('statement_timeout', $1, true)`,
		[][]byte{ms(completionTimeout)}, nil, nil, nil)
	b.ExecParams(completeSQL, [][]byte{[]byte(c.RunID), []byte(c.StepSlug), []byte(strconv.Itoa(c.TaskIndex)),
		[]byte(strconv.Itoa(c.Attempt)), []byte(c.Arg), []byte(proof)}, nil, nil, nil)
	results, err := pg.ExecBatch(ctx, b).ReadAll()
	if err != nil {
		return fail(err)
	}
	r := taskwrite.Result{Stale: true}
	if len(results) != 2 || len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 4 {
		return fail(errors.New("the completion function answered no row"))
	}
	if row := results[1].Rows[0]; string(row[0]) == "t" {
		r.Stale = false
		r.Status, r.ErrorMessage = string(row[1]), string(row[3])
		if row[2] != nil {
			r.Attempts, _ = strconv.Atoi(string(row[2]))
		}
	}
	if r.Stale || r.Status != "completed" {
		obs.Transaction("rolled_back")
		s.rollback(ctx)
		return Completion{Result: r}, nil
	}
	tag, err := pg.Exec(ctx, "commit").ReadAll()
	var pe *pgconn.PgError
	switch {
	case err == nil && len(tag) == 1 && tag[0].CommandTag.String() == "COMMIT":
		obs.Transaction("committed")
		return Completion{Result: r, Committed: true}, nil
	case err == nil:
		obs.Transaction("rolled_back")
		return Completion{Result: r}, errors.New("the task's transaction did not commit (PostgreSQL rolled it back)")
	case (errors.As(err, &pe) && pe.Severity == "ERROR") || pgconn.SafeToRetry(err):
		// PostgreSQL refused the commit (a deferred constraint, a serialization failure),
		// or it was never sent: T is rolled back. A FATAL answer (the backend was ended
		// during COMMIT) says nothing of whether the commit record was written first.
		obs.Transaction("rolled_back")
		s.discard()
		return Completion{Result: r}, fmt.Errorf("committing the task's transaction failed, so nothing it wrote is kept: %w", err)
	default:
		obs.Transaction("unknown")
		s.discard()
		return Completion{Result: r, Unknown: true}, fmt.Errorf("the answer to the task's COMMIT was lost: %w", err)
	}
}

// tx runs one of the guest's transaction requests ("tx": begin, commit, rollback: sql.begin
// and sql.savepoint). Each is a statement the host writes: the guest's own text can never
// hold transaction control. In a transactional step every block is a savepoint inside the
// task's T; in another step the outermost block is a real transaction (BEGIN ... COMMIT on
// the task's connection) and the inner ones savepoints.
func (s *Session) tx(ctx context.Context, kind string) ([]byte, error) {
	pg := s.conn.Conn().PgConn()
	n := len(s.levels)
	done := func(command string) ([]byte, error) {
		return []byte(`{"columns":[],"rows":[],"row_count":0,"command":"` + command + `"}`), nil
	}
	lost := func(err error) error {
		s.discard()
		s.levels = nil
		if !s.g.Transactional {
			s.inTx = false
			return sqlcap.Errorf(abi.ErrSQLFailed, "connection", "the database connection failed: %v", err)
		}
		return &sqlcap.Abort{Reason: "connection", Message: fmt.Sprintf(
			"the connection of %s's transaction was lost (%v): nothing it wrote is kept", s.g.Where, err)}
	}
	switch kind {
	case "begin":
		if n >= maxLevels {
			return nil, sqlcap.Errorf(abi.ErrBadRequest, "bad_request", "more than %d nested sql.begin/savepoint blocks", maxLevels)
		}
		b := &pgconn.Batch{}
		beginning := !s.inTx
		if beginning {
			s.queueBegin(b, time.Until(s.deadline))
		}
		name := ""
		if s.g.Transactional || !beginning {
			name = "pgflow_" + strconv.Itoa(n+1)
			b.ExecParams("savepoint "+name, nil, nil, nil, nil)
		}
		results, err := pg.ExecBatch(ctx, b).ReadAll()
		if err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				return nil, lost(err)
			}
			e := pgError(pe, nil)
			switch {
			case beginning:
				s.rollback(ctx)
			case n > 0:
				if s.levels[n-1].failed == nil {
					s.levels[n-1].failed = e
				}
			default:
				s.failed = e
			}
			return nil, e
		}
		if beginning {
			if len(results) > 2 && len(results[2].Rows) == 1 && len(results[2].Rows[0]) == 3 {
				s.user = string(results[2].Rows[0][2])
			}
			if s.user != s.g.Role {
				s.discard()
				return nil, &sqlcap.Abort{Reason: "role_changed", Message: fmt.Sprintf(
					"the session of %s is logged in as %q, not its role %q", s.g.Where, s.user, s.g.Role)}
			}
			s.inTx = true
		}
		s.levels = append(s.levels, level{savepoint: name})
		if name == "" {
			return done("BEGIN")
		}
		return done("SAVEPOINT")
	case "commit", "rollback":
		if n == 0 {
			return nil, sqlcap.Errorf(abi.ErrBadRequest, "bad_request", "a %q request with no open block (send {\"tx\": \"begin\"} first)", kind)
		}
		top := s.levels[n-1]
		s.levels = s.levels[:n-1]
		if top.savepoint == "" {
			// A non-transactional step's own transaction: it ends here.
			s.inTx = false
			if kind == "rollback" || top.failed != nil {
				if _, err := pg.Exec(ctx, "rollback").ReadAll(); err != nil {
					return nil, lost(err)
				}
				if top.failed != nil && kind == "commit" {
					return nil, s.blockFailed(top.failed)
				}
				return done("ROLLBACK")
			}
			tag, err := pg.Exec(ctx, "commit").ReadAll()
			if err != nil {
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Severity == "ERROR" {
					return nil, pgError(pe, nil) // a deferred constraint: rolled back
				}
				return nil, lost(err)
			}
			if len(tag) != 1 || tag[0].CommandTag.String() != "COMMIT" {
				return nil, sqlcap.Errorf(abi.ErrSQLFailed, "sqlstate", "the transaction did not commit (PostgreSQL rolled it back)")
			}
			return done("COMMIT")
		}
		if kind == "rollback" || top.failed != nil {
			if err := s.rollbackTo(ctx, top.savepoint); err != nil {
				return nil, lost(err)
			}
			if top.failed != nil && kind == "commit" {
				return nil, s.blockFailed(top.failed)
			}
			return done("ROLLBACK")
		}
		if _, err := pg.Exec(ctx, "release savepoint "+top.savepoint).ReadAll(); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				e := pgError(pe, nil)
				if s.rollbackTo(ctx, top.savepoint) != nil {
					return nil, lost(err)
				}
				return nil, e
			}
			return nil, lost(err)
		}
		return done("RELEASE")
	}
	return nil, sqlcap.Errorf(abi.ErrBadRequest, "bad_request", "unknown tx request %q", kind)
}

// maxLevels bounds nested blocks: each is a subtransaction of the server's.
const maxLevels = 32

// blockFailed is the error of a commit of a block in which a statement failed: the block was
// rolled back instead.
func (s *Session) blockFailed(first *sqlcap.Error) *sqlcap.Error {
	msg := strings.TrimSuffix(strings.TrimPrefix(first.Message, "sql: "), " (SQLSTATE "+first.SQLState+")")
	return &sqlcap.Error{Code: abi.ErrSQLFailed, Reason: "sqlstate", SQLState: "25P02", Message: fmt.Sprintf(
		"sql: the transaction block was rolled back, not committed: a statement in it failed with SQLSTATE %s: %s (SQLSTATE 25P02)",
		first.SQLState, msg)}
}

// rollbackTo rolls back to a savepoint and releases it: what the savepoint covered is undone
// and the transaction around it takes statements again.
func (s *Session) rollbackTo(ctx context.Context, name string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := s.conn.Conn().PgConn().Exec(rctx, "rollback to savepoint "+name+"; release savepoint "+name).ReadAll()
	return err
}
