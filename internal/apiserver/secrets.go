package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/secrets"
)

// Secrets manages the daemon's secret store. Only the unix socket serves these routes, and
// no route returns a value: a secret goes in and only its name, dates, kind and scope come
// out.
type Secrets interface {
	// SetSecret creates or replaces the secret name; with app, value is that GitHub App's
	// private key; with scope, that is where it may be sent (nil: the scope it has).
	SetSecret(ctx context.Context, name string, value secrets.Value, app *v1.GitHubApp, scope *v1.SecretScope) error
	// SetSecretScope replaces the scope of the secret name, keeping its value
	// (errdefs.ErrNotFound if there is none).
	SetSecretScope(ctx context.Context, name string, scope v1.SecretScope) error
	// ListSecrets returns every secret's name and dates, sorted by name.
	ListSecrets(ctx context.Context) ([]v1.SecretInfo, error)
	// DeleteSecret removes the secret name (errdefs.ErrNotFound if there is none).
	DeleteSecret(ctx context.Context, name string) error
}

// maxSecretBody bounds the body of PUT /v1/secrets/{name}: a value at the store's limit
// written entirely as JSON \u escapes (6 bytes a byte), and the envelope.
const maxSecretBody = 6*secrets.MaxValueBytes + 1024

// setSecret serves PUT /v1/secrets/{name} with body {"value": "...", "scope": {...}}: 204
// No Content.
// Neither the value nor any part of a body that does not parse reaches an error message
// or the log.
func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := secrets.CheckName(name); err != nil {
		writeError(w, err)
		return
	}
	req, err := decodeSecret(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.secrets.SetSecret(r.Context(), name, secrets.NewValue(req.Value), req.GitHubApp, req.Scope); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// decodeSecret reads the body of a PUT /v1/secrets/{name}. Unlike decode, its errors say
// what was wanted but never what was found: JSON syntax errors quote the input.
func decodeSecret(w http.ResponseWriter, r *http.Request) (v1.SetSecretRequest, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSecretBody))
	defer clear(body)
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return v1.SetSecretRequest{}, fmt.Errorf("request body larger than %d bytes (a secret holds at most %d bytes): %w", maxSecretBody, secrets.MaxValueBytes, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return v1.SetSecretRequest{}, fmt.Errorf("reading request body: %w", errdefs.ErrInvalidArgument)
	}
	var req v1.SetSecretRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(&req) != nil || dec.Decode(&struct{}{}) != io.EOF {
		return v1.SetSecretRequest{}, fmt.Errorf(`request body: want one JSON object {"value": "<secret>", "scope": {"hosts": [...], "methods", "path_prefix", "plain_http", "repositories"}} (and, for a GitHub App key, "github_app": {"app_id", "installation_id", "api_url"}): %w`, errdefs.ErrInvalidArgument)
	}
	return req, nil
}

// setSecretScope serves PUT /v1/secrets/{name}/scope with a SecretScope body: 204 No
// Content. The value stays; bindings made from now on must lie within the new scope, and
// running sandboxes' bindings outside it are not injected from their next connection on.
func (s *Server) setSecretScope(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := secrets.CheckName(name); err != nil {
		writeError(w, err)
		return
	}
	var sc v1.SecretScope
	if err := decode(r, &sc); err != nil {
		writeError(w, err)
		return
	}
	if err := s.secrets.SetSecretScope(r.Context(), name, sc); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listSecrets serves GET /v1/secrets: names, dates, kinds and scopes, never values.
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := s.secrets.ListSecrets(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []v1.SecretInfo{}
	}
	writeJSON(w, http.StatusOK, list)
}

// deleteSecret serves DELETE /v1/secrets/{name}: 204 No Content.
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.secrets.DeleteSecret(r.Context(), r.PathValue("name")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
