package sandbox

// Traits are what a runtime does differently, which the code around it adapts to: one
// place instead of comparisons with a runtime's name. They follow from the name recorded on
// a sandbox, so they are known also for a sandbox whose runtime is not available now.
type Traits struct {
	// OwnKernel: the sandbox runs on a kernel of its own (gVisor's runsc) without moat's
	// user namespace: its layers are not idmapped, the files of its drive and its run
	// directory belong to host root (uid 0 in the drive), its uid map is the identity
	// (no host uid to show), and its host pids cgroup counts the user-space kernel's
	// threads, not the sandbox's tasks.
	OwnKernel bool
	// FixedLimits: a warm sandbox's limits cannot be changed at hand-over (runsc sizes its
	// kernel at start), so its pool serves only creates with the pool's own limits.
	FixedLimits bool
	// Isolation names the boundary between the sandbox and the host kernel (moat doctor).
	Isolation string
}

// TraitsOf returns the traits of the named runtime (runc and crun: a container on the
// shared kernel; runsc: gVisor). Pure.
func TraitsOf(runtime string) Traits {
	if runtime == "runsc" {
		return Traits{OwnKernel: true, FixedLimits: true, Isolation: "gVisor (user-space kernel)"}
	}
	return Traits{Isolation: "container (shared kernel)"}
}
