// Package sqlcap is the SQL capability of step handlers as the sandbox sees it: the request
// a handler sends (one statement and its parameters), the statement filter every request
// passes before it reaches a database, the errors a call returns, and the Session a task's
// calls go through. The Session itself (a connection, the step's role, the task's
// transaction) is the worker's (internal/sqlsession): the sandbox holds no database driver.
//
// The database is the wall: statements run as the step's role, whose grants and row-level
// security decide what they may touch. The filter keeps a handler inside that role: only
// statements that read or write rows, no role or setting changes, no second statement, no
// server files, nothing that runs a string as SQL.
package sqlcap

import (
	"context"
	"fmt"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

// Defaults of a step's sql section.
const (
	DefaultMaxRows        = 1000
	DefaultMaxResultBytes = 1 << 20
	// MaxRequestBytes caps one request (statement text and parameters).
	MaxRequestBytes = 8 << 20
	// MaxParams is the protocol's limit of parameters per statement.
	MaxParams = 65535
)

// Session runs one task's statements. The sandbox calls Query for each sql_query of the
// guest, one at a time, with the task's context (its deadline ends a statement).
type Session interface {
	// Query runs one request and returns the result JSON. An *Error is returned to the
	// guest as an error code; any other error (an *Abort, a lost connection in a
	// transaction) fails the task at once.
	Query(ctx context.Context, request []byte) ([]byte, error)
}

// Error is a request refused or failed, returned to the guest as an error code. Message
// says what happened (with the SQLSTATE when PostgreSQL raised it) and never repeats a
// parameter value.
type Error struct {
	Code     int32
	Reason   string // short and fixed, for metrics: "refused", "sqlstate", ...
	SQLState string // PostgreSQL's error code when it raised the error
	Message  string
}

func (e *Error) Error() string { return e.Message }

// Abort is a failure that ends the task: a result over the step's limits, a role that a
// statement changed, a transaction whose connection was lost. The guest is stopped where
// it is and the task fails with Message.
type Abort struct {
	Reason  string // for metrics: "max_rows", "max_result_bytes", "role_changed", "connection"
	Message string
}

func (a *Abort) Error() string { return a.Message }

// Errorf builds an Error of code with a message prefixed "sql: ".
func Errorf(code int32, reason, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Message: "sql: " + fmt.Sprintf(format, args...)}
}

// Denied is the Error of a step without an sql section: where names the step.
func Denied(where string) *Error {
	return Errorf(abi.ErrDenied, "denied", "%s may not run SQL: it has no `sql` key in flows.yaml (grant a role with sql.role)", where)
}
