package doctor

// MemoryCheckpointFacts is what the daemon knows about one runtime's memory checkpoint for
// MemoryCheckpoint.
type MemoryCheckpointFacts struct {
	Runtime string
	// RuntimeCan: the runtime can checkpoint a moat sandbox's processes on this host.
	RuntimeCan bool
	Reason     string // the runtime's reason either way
	Fix        string // what would make it able to
	// Built: moat restores sandboxes from memory images with this runtime.
	Built bool
}

// MemoryCheckpoint is the doctor's line about `moat checkpoint` under one runtime: whether it
// saves the processes' memory or falls back to a filesystem snapshot, and why. Pure.
func MemoryCheckpoint(f MemoryCheckpointFacts) Check {
	c := Check{Name: "memory checkpoint (" + f.Runtime + ")"}
	switch {
	case f.RuntimeCan && f.Built:
		c.OK = true
		c.Detail = "`moat checkpoint` saves the processes' memory with the filesystem: " + f.Reason
	case f.RuntimeCan:
		c.Detail = "the runtime could (" + f.Reason + "), but moat's restore of a sandbox from a memory image is not built yet: `moat checkpoint` saves the filesystem only"
	default:
		c.Detail = "unavailable, `moat checkpoint` saves the filesystem only: " + f.Reason
		c.Fix = f.Fix
	}
	return c
}
