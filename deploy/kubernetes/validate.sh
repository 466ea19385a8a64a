#!/usr/bin/env bash
# Validates every manifest of this directory against a real API server with a server-side
# dry run (admission, defaulting, schema and strict field checks; nothing is stored), except
# the prerequisites others refer to, which are applied for real: namespace.yaml (the
# namespaces the rest live in), runtimeclasses.yaml (a Pod naming a RuntimeClass is refused
# without it) and the agent-sandbox CRDs (taken from the Go module cache, $AGENT_SANDBOX_CRDS
# or skipped with a note if absent).
#
# usage: deploy/kubernetes/validate.sh KUBECONFIG
#
# The API server must allow privileged Pods (node-agent.yaml); real clusters do. The
# project's test control plane, which does not by default:
#   MOAT_KUBE_APISERVER_ARGS=--allow-privileged=true scripts/test-cluster.sh up /tmp/kc
#   deploy/kubernetes/validate.sh /tmp/kc/admin.kubeconfig
#   scripts/test-cluster.sh down /tmp/kc
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 KUBECONFIG" >&2; exit 2; }
export KUBECONFIG=$1
here=$(cd "$(dirname "$0")" && pwd)
kubectl=${KUBECTL:-kubectl}
command -v "$kubectl" >/dev/null || kubectl=/var/cache/moat-kube/v1.37.2/bin/kubectl
k() { "$kubectl" "$@"; }

k apply -f "$here/namespace.yaml"
k apply -f "$here/runtimeclasses.yaml"
for f in front.yaml node-agent.yaml sandbox-pod-example.yaml; do
	k apply --dry-run=server -f "$here/$f"
done

crds=${AGENT_SANDBOX_CRDS:-}
if [ -z "$crds" ] && command -v go >/dev/null; then
	crds=$(go env GOMODCACHE)/sigs.k8s.io/agent-sandbox@v1.0.1/k8s/crds
fi
if [ -n "$crds" ] && [ -d "$crds" ]; then
	k apply -f "$crds"
	k wait --for condition=Established --timeout=30s \
		crd/sandboxes.agents.x-k8s.io crd/sandboxtemplates.extensions.agents.x-k8s.io \
		crd/sandboxclaims.extensions.agents.x-k8s.io crd/sandboxwarmpools.extensions.agents.x-k8s.io
	k apply --dry-run=server -f "$here/agent-sandbox-example.yaml"
else
	echo "agent-sandbox CRDs not found (go mod download sigs.k8s.io/agent-sandbox@v1.0.1, or set AGENT_SANDBOX_CRDS): agent-sandbox-example.yaml NOT validated" >&2
	exit 3
fi
echo "all manifests validated"
