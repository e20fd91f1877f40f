package schema

// The advisory lock keys: every fixed key pgflow-wasm takes, in one list.
//
// Advisory locks share one space per database, so two locks with one key are one lock:
// were an index build's key the upgrade lock's, every worker transaction (which takes the
// upgrade lock shared) would wait behind the build, and the build, which waits for their
// snapshots, would deadlock with them. The keys below are consecutive by construction, so
// no two are equal; a new lock gets the next one. Existing keys never change value:
// processes of two versions serving one database must agree on them.
//
// Keys derived from names (hashtext in SQL, fetchlease.Key) and the two-int liveness locks
// live apart from these: PostgreSQL keeps the two-int form in a space of its own, and a
// hash meeting one of these keys is a 2^-64 chance.

// lockKeyBase spells "pgfwasm" in the upper seven bytes.
const lockKeyBase int64 = 0x7067_6677_6173_6d00

// The single-bigint advisory lock keys of pgflow-wasm.
const (
	// LockKeyInstall serializes `db install` runs of one database (session lock).
	LockKeyInstall int64 = lockKeyBase + 1 + iota
	// LockKeyUpgrade keeps a pgflow migration and a worker's transactions apart (UpgradeLockShared).
	LockKeyUpgrade
	// LockKeyStepCompletion serializes creators of the transactional SQL steps' completion function.
	LockKeyStepCompletion
	// LockKeyRunTables serializes creators of the operator tables (internal/runctl).
	LockKeyRunTables
	// LockKeyIndexBuild is held (tried, never waited for) by whoever builds an index of
	// pgflow-wasm's on pgflow.runs: one build at a time, since a concurrent build on the
	// same table waits for the other's snapshot while the other waits for its table lock.
	LockKeyIndexBuild
	// LockKeyAttemptHistory serializes creators of pgflow_wasm.task_attempts.
	LockKeyAttemptHistory
	// LockKeyScheduleTable serializes creators of pgflow_wasm.schedule_ticks.
	LockKeyScheduleTable
)
