package v1

// StepsRequest is the body of POST /v1/templates/steps: a template built from a steps
// file (the E2B template builder's methods as YAML, docs/e2b-templates.md).
type StepsRequest struct {
	Name    string `json:"name"`
	Steps   string `json:"steps"`             // the file's content (YAML)
	File    string `json:"file,omitempty"`    // its path, for messages
	Context string `json:"context,omitempty"` // absolute directory on the daemon's host: copy's sources
}
