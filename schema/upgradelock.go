package schema

import "strconv"

// The upgrade lock (LockKeyUpgrade) keeps a pgflow migration and a worker's
// transactions apart: each migration's transaction takes it exclusively (applyOne), and each
// fetch and outcome write of a pgflow-wasm worker takes it shared (UpgradeLockShared) as
// its first statement. So a worker's transaction runs wholly before a migration or wholly
// after it, never calling pgflow's old functions on the new tables (an outcome written by
// 0.8.1's complete_task after 0.13's migration added step_states.output left its dependents
// a null input), and a migration never deadlocks with one. Migrations applied by other
// tools do not take it.
//
// UpgradeLockShared is the statement a worker's transaction starts with: it waits while a
// migration is being applied.
var UpgradeLockShared = "select pg_catalog.pg_advisory_xact_lock_shared(" + strconv.FormatInt(LockKeyUpgrade, 10) + ")"
