// The test control plane's bring-up, for `make test-cluster` and the node agent's tests.
// Standard library only, so that any nested module can require it (with a replace to this
// directory) without its versions moving that module's Kubernetes dependencies.
module github.com/moatdev/moat/test/cluster/harness

go 1.26.0
