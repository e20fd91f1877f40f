// Package liveness lets any worker tell at once that a pgflow-wasm worker process is gone.
//
// A heartbeat only says a worker was alive some seconds ago, so a worker killed with
// SIGKILL looks alive until its heartbeat goes stale (DefaultStaleAfter, StaleSQL). Each pgflow-wasm
// worker therefore holds, for as long as it lives, a session-level advisory lock per worker
// row on one dedicated connection. When the process dies the server closes that session and
// drops the locks at once; any sweeper can then see in pg_locks that no session holds them.
//
// A lock can also vanish while its worker lives: the connection broke, or the server
// restarted. The worker then reconnects within a second or two and takes its locks again, so
// a sweeper only believes a missing lock once it has seen it missing twice, a grace period
// apart (internal/recovery). Workers of other kinds (pgflow's TypeScript worker) hold no such
// lock and are judged by heartbeat alone.
package liveness

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// DefaultHeartbeatInterval is how often a pgflow-wasm worker touches its pgflow.workers rows
// unless configured otherwise (--heartbeat-interval).
const DefaultHeartbeatInterval = 5 * time.Second

// DefaultStaleAfter is how long a worker may go without a heartbeat and still count as alive
// (--worker-stale-after): six missed beats at the default interval, so a slow transaction or
// a brief outage does not make a live worker look dead.
const DefaultStaleAfter = 30 * time.Second

// StaleSQL is the one rule for a heartbeat gone stale, as an SQL condition: heartbeat (an
// expression of a last_heartbeat_at) is older than seconds (an expression of a number) on
// the database's clock, so a reader on another machine with a skewed clock judges alike.
// Recovery requeues the tasks of such a worker; the dashboard and `start` show it dead.
func StaleSQL(heartbeat, seconds string) string {
	return "(" + heartbeat + " < clock_timestamp() - make_interval(secs => " + seconds + "))"
}

// AliveSQL is "this pgflow.workers row is a live worker", as an SQL condition over the row's
// alias w: its heartbeat is not stale (StaleSQL) and, where the database has pgflow 0.10+'s
// workers.stopped_at (stoppedAt), it has not said it stopped. Deprecation is not death: a
// deprecated worker lives on to finish its tasks, it only takes no new ones.
func AliveSQL(w, seconds string, stoppedAt bool) string {
	alive := "not " + StaleSQL(w+".last_heartbeat_at", seconds)
	if stoppedAt {
		alive += " and " + w + ".stopped_at is null"
	}
	return "(" + alive + ")"
}

// FunctionName marks pgflow-wasm workers in pgflow.workers.function_name. Only workers with
// this name hold liveness locks, and only their tasks are subject to the step-timeout rule of
// the stalled-task sweep (they stop handlers at the timeout; other workers may not).
const FunctionName = "pgflow-wasm"

// LockClass is the first key of every liveness lock ("pgfw"); the second is the first four
// bytes of the worker id (LockKey). Two live workers whose ids share those bytes only make a
// dead one look alive until its heartbeat goes stale: the safe direction.
const LockClass int32 = 0x70676677

// LockKey is the second key of a worker's liveness lock.
func LockKey(workerID string) (int32, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(workerID, "-", "")[:min(8, len(workerID))])
	if err != nil || len(b) != 4 {
		return 0, fmt.Errorf("worker id %q is not a uuid", workerID)
	}
	return int32(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])), nil
}

// HeldLocksSQL selects, as column objid, the second keys of the liveness locks held in this
// database right now (pg_locks shows an int4 key as an unsigned oid).
var HeldLocksSQL = fmt.Sprintf(`
select l.objid from pg_catalog.pg_locks l
where l.locktype = 'advisory' and l.objsubid = 2 and l.granted
  and l.classid = %d::oid
  and l.database = (select d.oid from pg_catalog.pg_database d where d.datname = current_database())`, uint32(LockClass))

// KeySQL is the SQL expression of a worker's second key as pg_locks shows it, given an SQL
// expression of its uuid.
func KeySQL(workerIDExpr string) string {
	return "(('x' || substr(" + workerIDExpr + "::text, 1, 8))::bit(32)::bigint)::oid"
}
