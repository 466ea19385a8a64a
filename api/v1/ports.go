package v1

// Port previews: a TCP port a process listens on inside a sandbox, reached from outside
// through the daemon's listener (GET/PUT/DELETE /v1/sandboxes/{id}/ports[/{port}]).
//
// URL forms: host-based http(s)://<port>-<sandbox-id>.<preview-domain>/ (E2B's getHost)
// and path-based /preview/<sandbox-id>/<port>/ on the daemon's own address.

// Port visibilities (Port.Visibility).
const (
	// PortPrivate: only callers who may use the sandbox (its owner's API keys or console
	// sessions, team members for a team sandbox, admins, the operator). The default of
	// every port.
	PortPrivate = "private"
	// PortToken: anyone presenting the port's token (in the URL or a header).
	PortToken = "token"
	// PortPublic: anyone; refused unless the operator allows public ports.
	PortPublic = "public"
)

// Port is one port of a sandbox as previews see it.
type Port struct {
	Port int `json:"port"`
	// Visibility is PortPrivate, PortToken or PortPublic.
	Visibility string `json:"visibility"`
	// Listening: a process in the sandbox listens on the port (TCP, any address).
	Listening bool `json:"listening"`
	// Token is the port's access token when Visibility is PortToken (shown only to those
	// who may use the sandbox).
	Token string `json:"token,omitempty"`
	// URL is the host-based preview URL ("" when the daemon has no preview domain) and
	// PathURL the path-based one, relative to the daemon's address.
	URL     string `json:"url,omitempty"`
	PathURL string `json:"path_url"`
}

// PortRequest is the body of PUT /v1/sandboxes/{id}/ports/{port} (moat port open).
type PortRequest struct {
	Visibility string `json:"visibility"`
}
