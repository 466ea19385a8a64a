package v1

import "time"

// SetSecretRequest is the body of PUT /v1/secrets/{name}. Value is the secret itself; the
// daemon never returns it.
type SetSecretRequest struct {
	Value string `json:"value"`
	// GitHubApp, if set, says Value is this GitHub App's private key (PEM): moat then mints
	// short-lived installation tokens from it for bindings that name their repositories.
	GitHubApp *GitHubApp `json:"github_app,omitempty"`
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
