package v1

import "time"

// SetSecretRequest is the body of PUT /v1/secrets/{name}. Value is the secret itself; the
// daemon never returns it.
type SetSecretRequest struct {
	Value string `json:"value"`
	// GitHubApp, if set, says Value is this GitHub App's private key (PEM): moat then mints
	// short-lived installation tokens from it for bindings that name their repositories.
	GitHubApp *GitHubApp `json:"github_app,omitempty"`
	// Scope is where the secret may be sent. Absent: the secret keeps the scope it has (a
	// new secret then has none, and cannot be bound until PUT /v1/secrets/{name}/scope).
	Scope *SecretScope `json:"scope,omitempty"`
}

// SecretScope is where a secret may be sent, set by whoever stores it: every credential
// binding of the secret must lie within it, or the sandbox create is refused (403).
type SecretScope struct {
	// Hosts: "HOST", "*.DOMAIN" or either with ":PORT", as in bindings (no port: 443, and
	// 80 with PlainHTTP). A binding's hosts must each be within one of these.
	Hosts []string `json:"hosts"`
	// Methods, if any, bound a binding's methods; a binding without methods gets these.
	Methods []string `json:"methods,omitempty"`
	// PathPrefix, if set, must start a binding's path prefix; a binding without one gets it.
	PathPrefix string `json:"path_prefix,omitempty"`
	// PlainHTTP lets bindings send the value in plain HTTP (plain_http) too.
	PlainHTTP bool `json:"plain_http,omitempty"`
	// Repositories, for a GitHub App key only, are the repositories its tokens may be minted
	// for (none: any the binding names).
	Repositories []string `json:"repositories,omitempty"`
	// Headers are the request headers a binding may write the value into: its
	// placeholder_header, or a header binding's header (whose template must then be
	// "{{value}}" or "SCHEME {{value}}"). Absent or empty: Authorization only. Names ignore
	// case; the daemon returns them canonical (X-Api-Key).
	Headers []string `json:"headers,omitempty"`
}

// GitHubApp identifies a GitHub App installation.
type GitHubApp struct {
	AppID          string `json:"app_id"`
	InstallationID int64  `json:"installation_id"`
	APIURL         string `json:"api_url,omitempty"` // default https://api.github.com
}

// SecretInfo describes a stored secret, without its value (GET /v1/secrets).
type SecretInfo struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// GitHubApp is set for a GitHub App's private key.
	GitHubApp *GitHubApp `json:"github_app,omitempty"`
	// Scope is where the secret may be sent; null: nowhere, it cannot be bound (a secret
	// stored before moat kept scopes, or without one).
	Scope *SecretScope `json:"scope"`
	// Bindings are the sandboxes (not deleted) that bind the secret, and to which hosts.
	Bindings []SecretBinding `json:"bindings"`
}

// SecretBinding is one sandbox's binding of a secret.
type SecretBinding struct {
	Sandbox string   `json:"sandbox"`
	Hosts   []string `json:"hosts"`
	// Kind is "placeholder" (an environment variable), "header" or "github" (tokens).
	Kind string `json:"kind"`
}
