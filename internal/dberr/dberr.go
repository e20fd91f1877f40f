// Package dberr is the worker's one taxonomy of database errors: what a failed statement
// means for the task it was about.
//
//   - Transient: the database could not do it now (the connection or the server went away,
//     it is out of disk, memory or connections, an operator stopped it, a failover left it
//     read-only, a deadlock or serialization failure, a lock or a statement timeout of our
//     own). The same statement later will do; a task is never failed and no attempt is
//     spent over it.
//   - Verdict: pgflow (or PostgreSQL on pgflow's behalf) refused what was asked: an output
//     jsonb cannot store, a constraint or an exception raised by pgflow's functions. Asking
//     again gets the same answer: for an output, the task fails with the reason.
//   - Ours: anything else, such as a statement that names what the database lacks: a fault
//     of pgflow-wasm or of how the database was changed under it. Retrying cannot cure it,
//     but failing tasks over it would blame the handlers: the worker keeps the outcome and
//     says so loudly.
//
// docs/RATIONALE.md ("Database errors") lists the SQLSTATEs with the reason for each.
package dberr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what an error means for the task a statement was about.
type Class int

// Classes.
const (
	ClassNone      Class = iota // no error
	ClassTransient              // try again later; never fail a task over it
	ClassVerdict                // pgflow refused it: the same request gets the same answer
	ClassOurs                   // a fault of pgflow-wasm or of the schema under it
	ClassCanceled               // the caller gave up (context canceled or its deadline passed)
)

func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassTransient:
		return "transient"
	case ClassVerdict:
		return "verdict"
	case ClassOurs:
		return "ours"
	case ClassCanceled:
		return "canceled"
	}
	return "unknown"
}

// transientCodes are SQLSTATEs (or their classes, two characters) that a later retry may
// not meet.
var transientCodes = map[string]string{
	"08":    "connection exception",
	"53":    "insufficient resources (disk full, out of memory, too many connections)",
	"57P01": "admin shutdown",
	"57P02": "crash shutdown",
	"57P03": "cannot connect now (starting up, in recovery)",
	"57P04": "database dropped",
	"57P05": "idle session timeout",
	"57014": "statement canceled (a statement timeout of our own)",
	"58000": "system error (an I/O error of the server)",
	"58030": "I/O error of the server",
	"40001": "serialization failure",
	"40P01": "deadlock detected",
	"55P03": "lock not available",
	"55006": "object in use",
	"25006": "read-only transaction (a standby after a failover, or default_transaction_read_only)",
	"XX001": "data corrupted (a server fault)",
	"XX002": "index corrupted (a server fault)",
}

// verdictClasses are SQLSTATE classes of a refusal of the request itself.
var verdictClasses = map[string]string{
	"22": "data exception (an output jsonb cannot store, a value out of range)",
	"23": "integrity constraint violation",
	"P0": "an exception raised by pgflow's functions",
	"2F": "SQL routine exception",
	"39": "external routine invocation exception",
}

// Classify says what err means. A context error is ClassCanceled.
func Classify(err error) Class {
	if err == nil {
		return ClassNone
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return classifyCode(pgErr.Code)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ClassCanceled
	}
	if connectionLost(err) {
		return ClassTransient
	}
	return ClassOurs
}

func classifyCode(code string) Class {
	if len(code) != 5 {
		return ClassOurs
	}
	if _, ok := transientCodes[code]; ok {
		return ClassTransient
	}
	if _, ok := transientCodes[code[:2]]; ok {
		return ClassTransient
	}
	if _, ok := verdictClasses[code[:2]]; ok {
		return ClassVerdict
	}
	return ClassOurs
}

// Transient reports whether err is an error a retry with backoff may cure (ClassTransient).
// Context cancellation is not transient: the caller gave up.
func Transient(err error) bool { return Classify(err) == ClassTransient }

// Verdict reports whether pgflow refused the request (ClassVerdict).
func Verdict(err error) bool { return Classify(err) == ClassVerdict }

// SQLState is err's SQLSTATE, or "" when it carries none (a network error).
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Describe names what a transient error is, for logs: "disk full (53100)".
func Describe(err error) string {
	code := SQLState(err)
	switch {
	case code == "":
		if connectionLost(err) {
			return "connection lost"
		}
		return "no SQLSTATE"
	case transientCodes[code] != "":
		return transientCodes[code] + " (" + code + ")"
	case transientCodes[code[:2]] != "":
		return transientCodes[code[:2]] + " (" + code + ")"
	case verdictClasses[code[:2]] != "":
		return verdictClasses[code[:2]] + " (" + code + ")"
	}
	return "SQLSTATE " + code
}

// connectionLost reports a network-level failure: the connection broke or never came up.
func connectionLost(err error) bool {
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	// pgx reports a connection closed under it without a typed error.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "unexpected EOF")
}

// UndefinedTable reports whether err says a table the statement names does not exist
// (42P01): an optional table of pgflow-wasm's that this database has not got.
func UndefinedTable(err error) bool { return SQLState(err) == "42P01" }

// schemaCodes are SQLSTATEs of a statement that does not fit the schema it met: what a
// worker's prepared statements, or a twin of start_tasks (package plans), meet when
// pgflow is upgraded under them.
var schemaCodes = map[string]bool{
	"42804": true, // datatype mismatch (a function's result type changed)
	"42883": true, // undefined function (a signature changed)
	"42P01": true, // undefined table
	"42703": true, // undefined column
	"42704": true, // undefined object (a type)
	"0A000": true, // feature not supported: "cached plan must not change result type"
	"55000": true, // object not in prerequisite state: a stale twin of start_tasks
}

// ErrSchemaChanged is wrapped by errors that found pgflow changed under the statement's
// caller before the database said so (a fetch that saw a newer migration recorded).
var ErrSchemaChanged = errors.New("pgflow changed under the worker")

// SchemaChanged reports whether err is one a changed schema causes (schemaCodes, or
// ErrSchemaChanged): a worker should look whether pgflow was upgraded under it.
func SchemaChanged(err error) bool {
	return errors.Is(err, ErrSchemaChanged) || schemaCodes[SQLState(err)]
}
