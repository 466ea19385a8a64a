package v1

// Per-user egress (issue 15): a sandbox user without sudo can have egress rules and
// credentials of its own, narrower than the sandbox's.

// UserEgress is one user's own egress: a destination is reachable by the user only when
// the sandbox's policy and Allow both allow it; only the credential bindings named in
// Credentials (by secret) are injected into the user's requests.
type UserEgress struct {
	// Allow holds rules in the policy's rule syntax ("host[:ports]", "*.domain",
	// "a.b.c.d/n", set names). Empty: the user reaches nothing.
	Allow []string `json:"allow"`
	// Credentials are secret names of the sandbox's bindings. Empty: none.
	Credentials []string `json:"credentials,omitempty"`
}

// SetUserEgressRequest is the body of PUT /v1/sandboxes/{id}/users/{name}/egress.
type SetUserEgressRequest = UserEgress

// UserEgressResponse answers PUT and DELETE /v1/sandboxes/{id}/users/{name}/egress.
type UserEgressResponse struct {
	Sandbox string `json:"sandbox"`
	User    string `json:"user"`
	UID     uint32 `json:"uid"`
	// Egress is the user's own egress; null: the user has the sandbox's.
	Egress *UserEgress `json:"egress"`
	// ConnectionsCut is how many open connections of the sandbox the change cut.
	ConnectionsCut int `json:"connections_cut"`
}
