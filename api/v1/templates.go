package v1

import (
	"fmt"
	"regexp"

	"github.com/moatdev/moat/internal/errdefs"
)

// TemplateRemoval answers DELETE /v1/templates/{name}: what used the template (with
// ?force=true it was removed anyway; without, the request failed with 409 naming them).
type TemplateRemoval struct {
	Name  string   `json:"name"`
	Users []string `json:"users,omitempty"` // "sandbox ID", "warm pool RUNTIME:TEMPLATE", "snapshot ID"
}

// DockerfileRequest is the body of POST /v1/templates/dockerfile.
type DockerfileRequest struct {
	Name       string `json:"name"`
	Dockerfile string `json:"dockerfile"`        // the file's content
	File       string `json:"file,omitempty"`    // its path, for messages
	Context    string `json:"context,omitempty"` // absolute directory on the daemon's host: COPY's sources
}

// BuildReport says what a Dockerfile build did: each step, the cache key of the layer of
// each step that changes files, and whether that layer came from the cache.
type BuildReport struct {
	Steps   []BuildStep `json:"steps"`
	Cached  int         `json:"cached"`
	Built   int         `json:"built"`
	Seconds float64     `json:"seconds"`
}

// BuildStep is one step of a BuildReport.
type BuildStep struct {
	N      int    `json:"n"`
	Step   string `json:"step"`
	Layer  string `json:"layer,omitempty"`
	Cached bool   `json:"cached,omitempty"`
}

var templateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidTemplateName reports an errdefs.ErrInvalidArgument unless name is a legal template
// name: 1-63 of [a-z0-9._-], starting with a letter or digit. The daemon's storage and
// the API's E2B template routes check names with it.
func ValidTemplateName(name string) error {
	if !templateNameRE.MatchString(name) {
		return fmt.Errorf("template name %q: must be 1-63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit: %w",
			name, errdefs.ErrInvalidArgument)
	}
	return nil
}
