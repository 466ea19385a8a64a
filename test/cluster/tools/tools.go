//go:build tools

// Package tools names the control-plane commands this module builds, so that `go mod tidy`
// keeps their dependencies (a main package cannot be imported; its app package can).
package tools

import (
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
