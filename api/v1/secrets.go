package v1

import "time"

// SetSecretRequest is the body of PUT /v1/secrets/{name}. Value is the secret itself; the
// daemon never returns it.
type SetSecretRequest struct {
	Value string `json:"value"`
}

// SecretInfo describes a stored secret, without its value (GET /v1/secrets).
type SecretInfo struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}
