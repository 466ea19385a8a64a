//go:build tools

// Package tools names the agent-sandbox controller's command (a main package) so that
// `go mod tidy` keeps its dependencies.
package tools

import _ "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
