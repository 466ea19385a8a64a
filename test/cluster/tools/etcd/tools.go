//go:build tools

// Package tools names etcd's command (go.etcd.io/etcd/server/v3, a main package) through the
// package it calls, so that `go mod tidy` keeps its dependencies.
package tools

import _ "go.etcd.io/etcd/server/v3/etcdmain"
