package jshandler

// ForgetSnapshots drops the process's own snapshots, so the next Load makes or reads one.
func ForgetSnapshots() {
	snapshots.Lock()
	clear(snapshots.m)
	snapshots.Unlock()
}
