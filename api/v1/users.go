package v1

// Agents as Linux users (issue 15): accounts moat adds to a sandbox.

// UserRequest is the body of POST /v1/sandboxes/{id}/users, and one entry of a create's
// users: a name ([a-z_][a-z0-9_-]{0,31}, not root nor an account of the template), shared
// groups (each with /shared/GROUP), and sudo (passwordless; the user can then become any
// user, root included).
type UserRequest struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	Sudo   bool     `json:"sudo,omitempty"`
}

// User is an account moat added to a sandbox. UID and GID (its private group, named like
// it) are moat's choice, fixed for the sandbox's life; 0 while a create's user waits for
// its sandbox to start.
type User struct {
	Name   string   `json:"name"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Home   string   `json:"home"`
	Groups []string `json:"groups,omitempty"`
	Sudo   bool     `json:"sudo,omitempty"`
	// Egress is the user's own, narrower egress (PUT …/users/{name}/egress); absent: the
	// sandbox's.
	Egress *UserEgress `json:"egress,omitempty"`
}

// SharedGroup is a group moat made for its users: its directory is /shared/NAME
// (root:NAME, mode 2770).
type SharedGroup struct {
	Name    string   `json:"name"`
	GID     uint32   `json:"gid"`
	Dir     string   `json:"dir"`
	Members []string `json:"members"`
}

// UserList is the answer of GET /v1/sandboxes/{id}/users.
type UserList struct {
	Users  []User        `json:"users"`
	Groups []SharedGroup `json:"groups"`
}
