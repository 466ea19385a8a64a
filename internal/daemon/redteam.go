package daemon

// TestWeaken is a deliberately weakened configuration for the tests of `moat redteam`
// (internal/redteam): a daemon given one must fail the red-team probe that covers what it
// weakens. Only Go tests set it; `moat serve`, the in-process daemon of the CLI and the API
// never do.
type TestWeaken struct {
	// ExtraCaps are added to every container's bounding, effective and permitted sets
	// (runc/crun; e.g. CAP_NET_RAW, which the raw-sockets probe must catch).
	ExtraCaps []string
	// NoSeccomp starts every container without its seccomp filter (runc/crun).
	NoSeccomp bool
}
