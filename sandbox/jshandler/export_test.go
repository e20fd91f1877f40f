package jshandler

// ForgetSnapshots drops what the process keeps in memory (snapshots, bundles, the compiled
// engine of the snapshot runtime), so the next Load is what a new process's would be.
func ForgetSnapshots() {
	snapshots.Lock()
	clear(snapshots.m)
	clear(snapshots.caches)
	snapshots.Unlock()
	bundles.Lock()
	clear(bundles.m)
	bundles.Unlock()
}
