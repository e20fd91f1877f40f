package sqlcap

import (
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

// ErrRefused is the error code of a statement the filter refused.
const ErrRefused = abi.ErrSQLRefused

func refuse(format string, args ...any) *Error { return Errorf(ErrRefused, "refused", format, args...) }

// Why a function is refused; each says what the call would do that the step's role and
// grants do not bound, or that the filter cannot check.
const (
	whySettings = "it changes settings, the role among them (a step runs with the role and settings the worker gave its task)"
	whyRunsSQL  = "it runs a string as SQL, which the filter cannot read (write that query in the statement itself)"
	whyFiles    = "it reaches the server's files"
	whyServer   = "it acts on other sessions or on the server itself"
	whyNotify   = "it sends notifications, on the worker's and pgflow's channels too (write rows instead)"
	whyAdvisory = "it takes an advisory lock, in a space every session of the database shares: " +
		"it may block the worker's own locks and other tasks'"
	whyOutlives = "its effect is outside the transaction and outlives the task (replication slots and origins, WAL messages)"
)

// refusedFuncs are the functions a handler may not call, by name in any schema; the
// families in refusedPrefixes below. A name is PostgreSQL's, as the parser reads it: an
// unquoted name folded to lower case, a quoted one exact (no built-in is spelt "TS_STAT").
//
// The built-ins that run a string as SQL or plan a query given as text were found in
// PostgreSQL 15's catalogue (pg_proc: the C functions that run statements through SPI with
// a text or cursor argument): query_to_xml and its xmlschema variants, cursor_to_xml*,
// ts_stat (both forms), and ts_rewrite(tsquery, text) (refused in both forms: the form is
// chosen by argument types, which the filter does not know). table_to_xml*, schema_to_xml*
// and database_to_xml* build their query from names and are refused with the family.
// Extensions' string runners are refused by name too: dblink*, tablefunc's crosstab* and
// connectby, xml2's xpath_table.
//
// Left allowed, on purpose: xpath and the other XML functions (they evaluate XPath, never
// SQL); pg_get_* (they print definitions); the lo_* functions other than lo_import and
// lo_export (large objects are rows of pg_largeobject, bounded by their owners' grants,
// and roll back with the transaction); txid_* and pg_current_xact_id (they read or assign
// the transaction's id, as any write does); current_setting (it reads what SHOW shows).
var refusedFuncs = map[string]string{
	"set_config":   whySettings,
	"ts_stat":      whyRunsSQL,
	"ts_rewrite":   whyRunsSQL,
	"connectby":    whyRunsSQL,
	"xpath_table":  whyRunsSQL,
	"pg_stat_file": whyFiles, "pg_logdir_ls": whyFiles, "lo_import": whyFiles, "lo_export": whyFiles,
	"pg_notify":            whyNotify,
	"pg_terminate_backend": whyServer, "pg_cancel_backend": whyServer, "pg_reload_conf": whyServer,
	"pg_rotate_logfile": whyServer, "pg_promote": whyServer, "pg_log_backend_memory_contexts": whyServer,
	"pg_logical_emit_message": whyOutlives, "pg_drop_replication_slot": whyOutlives,
	"pg_replication_slot_advance": whyOutlives,
}

var refusedPrefixes = []struct{ prefix, why string }{
	{"query_to_xml", whyRunsSQL}, {"cursor_to_xml", whyRunsSQL}, {"table_to_xml", whyRunsSQL},
	{"schema_to_xml", whyRunsSQL}, {"database_to_xml", whyRunsSQL}, {"dblink", whyRunsSQL},
	{"crosstab", whyRunsSQL},
	{"pg_read_", whyFiles}, {"pg_ls_", whyFiles}, {"pg_file_", whyFiles},
	{"pg_advisory_", whyAdvisory}, {"pg_try_advisory_", whyAdvisory},
	{"pg_create_physical_replication_slot", whyOutlives}, {"pg_create_logical_replication_slot", whyOutlives},
	{"pg_copy_physical_replication_slot", whyOutlives}, {"pg_copy_logical_replication_slot", whyOutlives},
	{"pg_logical_slot_", whyOutlives}, {"pg_replication_origin_", whyOutlives},
}

// refusedFunc says why name may not be called; "" when it may.
func refusedFunc(name string) string {
	if why, ok := refusedFuncs[name]; ok {
		return why
	}
	for _, p := range refusedPrefixes {
		if strings.HasPrefix(name, p.prefix) {
			return p.why
		}
	}
	return ""
}

// nulByte refuses a statement with a NUL byte: PostgreSQL's protocol and libpg_query both
// end a statement's text there, so what follows would be read by no one the same way.
func nulByte(sql string) *Error {
	if strings.IndexByte(sql, 0) >= 0 {
		return refuse("the statement contains a NUL byte (\\u0000 in the request's JSON): remove it")
	}
	return nil
}

func refuseCall(name string) *Error {
	return refuse("calling %s is not allowed: %s", name, refusedFunc(name))
}
