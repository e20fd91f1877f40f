package sqlsession

// SkipFilter makes g's sessions send statements without the filter (sandbox/sqlcap), so a
// test sees what the database's own wall does alone.
func SkipFilter(g *Grant) { g.skipFilter = true }
