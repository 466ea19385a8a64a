package sandbox

// Traits are what a runtime does differently, which the code around it adapts to: one
// place instead of comparisons with a runtime's name. They follow from the name recorded on
// a sandbox, so they are known also for a sandbox whose runtime is not available now.
type Traits struct {
	// OwnKernel: the sandbox runs on a kernel of its own (gVisor's runsc): its host pids
	// cgroup counts the user-space kernel's threads, not the sandbox's tasks. Whether it
	// also has a user namespace of moat's depends on the runsc (Sandbox.InUserNS).
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
