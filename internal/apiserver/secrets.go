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
// no route returns a value: a secret goes in and only its name and dates come out.
type Secrets interface {
	// SetSecret creates or replaces the secret name; with app, value is that GitHub App's
	// private key.
	SetSecret(ctx context.Context, name string, value secrets.Value, app *v1.GitHubApp) error
	// ListSecrets returns every secret's name and dates, sorted by name.
	ListSecrets(ctx context.Context) ([]v1.SecretInfo, error)
	// DeleteSecret removes the secret name (errdefs.ErrNotFound if there is none).
	DeleteSecret(ctx context.Context, name string) error
}

// maxSecretBody bounds the body of PUT /v1/secrets/{name}: a value at the store's limit
// written entirely as JSON \u escapes (6 bytes a byte), and the envelope.
const maxSecretBody = 6*secrets.MaxValueBytes + 1024

// setSecret serves PUT /v1/secrets/{name} with body {"value": "..."}: 204 No Content.
// Neither the value nor any part of a body that does not parse reaches an error message
// or the log.
func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := secrets.CheckName(name); err != nil {
		writeError(w, err)
		return
	}
	value, app, err := decodeSecret(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.secrets.SetSecret(r.Context(), name, value, app); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// decodeSecret reads the body of a PUT /v1/secrets/{name}. Unlike decode, its errors say
// what was wanted but never what was found: JSON syntax errors quote the input.
func decodeSecret(w http.ResponseWriter, r *http.Request) (secrets.Value, *v1.GitHubApp, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSecretBody))
	defer clear(body)
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return secrets.Value{}, nil, fmt.Errorf("request body larger than %d bytes (a secret holds at most %d bytes): %w", maxSecretBody, secrets.MaxValueBytes, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return secrets.Value{}, nil, fmt.Errorf("reading request body: %w", errdefs.ErrInvalidArgument)
	}
	var req v1.SetSecretRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(&req) != nil || dec.Decode(&struct{}{}) != io.EOF {
		return secrets.Value{}, nil, fmt.Errorf(`request body: want one JSON object {"value": "<secret>"} (and, for a GitHub App key, "github_app": {"app_id", "installation_id", "api_url"}): %w`, errdefs.ErrInvalidArgument)
	}
	return secrets.NewValue(req.Value), req.GitHubApp, nil
}

// listSecrets serves GET /v1/secrets: names and dates, never values.
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
