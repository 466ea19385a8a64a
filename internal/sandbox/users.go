package sandbox

// Agents as Linux users: accounts moat adds to a sandbox (issue 15). This file holds the
// record shapes every part shares; the operations live beside them.

// User is an account moat added to a sandbox: its uid and gid are moat's choice, fixed for
// the sandbox's life, so the daemon can tell its processes apart by uid from outside.
type User struct {
	Name string `json:"name"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	// Groups are the shared groups the user belongs to (each with /shared/<group>).
	Groups []string `json:"groups,omitempty"`
	// Sudo: the user may become root (and so any other user) with sudo.
	Sudo bool `json:"sudo,omitempty"`
	// Egress narrows the sandbox's egress and credentials for this user; nil: the user
	// has the sandbox's. Refused for sudo users, who can become any uid.
	Egress *UserEgress `json:"egress,omitempty"`
}

// UserEgress is one user's own, narrower egress: a destination is reachable by the user
// only when the sandbox's policy and Allow both allow it, and only the named credential
// bindings are injected into the user's requests.
type UserEgress struct {
	// Allow holds rules in the policy's rule syntax (as `moat policy` takes them).
	Allow []string `json:"allow"`
	// Credentials names the sandbox's bindings (by secret name) the user's requests get;
	// empty: none.
	Credentials []string `json:"credentials,omitempty"`
}
