package runtime

// Typed options for each runtime subcommand, rendered to argv. runc, crun and runsc share
// this command-line interface (runsc adds a few global flags).

// globalOpts are the flags before the subcommand.
type globalOpts struct {
	root       string   // --root: state directory
	network    string   // runsc --network: sandbox, host or none
	ociSeccomp bool     // runsc --oci-seccomp: enforce the spec's seccomp profile inside gVisor
	overlay2   string   // runsc --overlay2
	goferNet   string   // runsc --gofer-network-namespace
	extra      []string // caller-supplied, verbatim
}

func (g globalOpts) args() []string {
	var a []string
	if g.root != "" {
		a = append(a, "--root", g.root)
	}
	if g.network != "" {
		a = append(a, "--network="+g.network)
	}
	if g.ociSeccomp {
		a = append(a, "--oci-seccomp")
	}
	if g.overlay2 != "" {
		a = append(a, "--overlay2="+g.overlay2)
	}
	if g.goferNet != "" {
		a = append(a, "--gofer-network-namespace="+g.goferNet)
	}
	return append(a, g.extra...)
}

// runOpts: `run [--detach] --bundle B ID`: create + start, and wait for the container to
// end unless detached (Probe waits; Start detaches).
type runOpts struct {
	bundle string
	detach bool
}

func (r runOpts) args(id string) []string {
	if r.detach {
		return []string{"run", "--detach", "--bundle", r.bundle, id}
	}
	return []string{"run", "--bundle", r.bundle, id}
}

// killOpts: `kill [--all] ID SIGNAL`.
type killOpts struct {
	all    bool
	signal string
}

func (k killOpts) args(id string) []string {
	a := []string{"kill"}
	if k.all {
		a = append(a, "--all")
	}
	return append(a, id, k.signal)
}

// deleteOpts: `delete [--force] ID`.
type deleteOpts struct{ force bool }

func (d deleteOpts) args(id string) []string {
	a := []string{"delete"}
	if d.force {
		a = append(a, "--force")
	}
	return append(a, id)
}

type stateOpts struct{}

func (stateOpts) args(id string) []string { return []string{"state", id} }

type pauseOpts struct{}

func (pauseOpts) args(id string) []string { return []string{"pause", id} }

type resumeOpts struct{}

func (resumeOpts) args(id string) []string { return []string{"resume", id} }

type listOpts struct{}

func (listOpts) args() []string { return []string{"list", "--format", "json"} }
