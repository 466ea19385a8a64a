package tiers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/moatdev/moat/internal/errdefs"
)

// MaxFileSize bounds a tiers file.
const MaxFileSize = 1 << 20

// maxTiers bounds the tiers of one file.
const maxTiers = 256

// fileFormat is the tiers file (`moat serve --tiers FILE`), YAML or JSON:
//
//	tiers:
//	  - name: read-docs
//	    description: read the docs site only
//	    egress: {methods: [GET, HEAD], allow: [docs.example.com]}
//	    credentials: {mode: none}
//	    git: {push: none}
//
// Unknown fields are errors, so a misspelt field does not silently loosen a tier.
type fileFormat struct {
	Tiers []Tier `yaml:"tiers"`
}

// ParseFile reads a tiers file and validates each tier; errors name the tier and the
// field, and are errdefs.ErrInvalidArgument. It does not check names against the
// built-ins: NewSet lets a file replace one.
func ParseFile(data []byte) ([]Tier, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("tiers file: larger than %d bytes: %w", MaxFileSize, errdefs.ErrInvalidArgument)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("tiers file: empty; want a list under \"tiers:\": %w", errdefs.ErrInvalidArgument)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f fileFormat
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tiers file: %s: %w", yamlError(err), errdefs.ErrInvalidArgument)
	}
	var extra fileFormat
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("tiers file: more than one YAML document: %w", errdefs.ErrInvalidArgument)
	}
	if len(f.Tiers) == 0 {
		return nil, fmt.Errorf("tiers file: no tiers; want a list under \"tiers:\": %w", errdefs.ErrInvalidArgument)
	}
	if len(f.Tiers) > maxTiers {
		return nil, fmt.Errorf("tiers file: more than %d tiers: %w", maxTiers, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	for i, t := range f.Tiers {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("tiers file: tier %d (%q): %w", i+1, truncate(t.Name, 80), err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tiers file: tier %d: %q is defined twice: %w", i+1, t.Name, errdefs.ErrInvalidArgument)
		}
		seen[t.Name] = true
	}
	return f.Tiers, nil
}

// yamlError is err's message in one line, without the library's prefix.
func yamlError(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.ReplaceAll(s, "\n ", ";")
	s = strings.ReplaceAll(s, "\n", "; ")
	return truncate(s, 400)
}
