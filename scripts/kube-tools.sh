#!/usr/bin/env bash
# Builds the pinned test control plane for `make test-cluster` from the Go module proxy:
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of Kubernetes
# $KUBE_VERSION (module test/cluster/tools), and etcd $ETCD_VERSION (module
# test/cluster/tools/etcd), and the agent-sandbox controller $AGENT_SANDBOX_VERSION (module
# test/cluster/tools/agentsandbox; its CRDs go to $bin/../agent-sandbox-crds), into a cache
# outside the checkout. Each module's go.sum pins every
# source tree. A binary whose stamp file names its pinned version is not rebuilt, so a warm run
# takes well under a second; a cold one about 6 minutes and 3 GiB of memory on 2 cores.
# Prints the directory of the binaries on stdout (progress goes to stderr).
#
# usage: scripts/kube-tools.sh [CACHE]   (default $MOAT_KUBE_CACHE or /var/cache/moat-kube)
set -euo pipefail

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
AGENT_SANDBOX_VERSION=v1.0.1

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-${MOAT_KUBE_CACHE:-/var/cache/moat-kube}}
bin=$cache/$KUBE_VERSION/bin
GO=${GO:-go}
mkdir -p "$bin"
work=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

current() { [ -x "$bin/$1" ] && [ "$(cat "$bin/$1.version" 2>/dev/null)" = "$2" ]; }
install_bin() { # name version
	mv "$work/$1" "$bin/$1" && echo "$2" >"$bin/$1.version"
}

kube=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
need=()
for c in "${kube[@]}"; do current "$c" "$KUBE_VERSION" || need+=("$c"); done
if [ ${#need[@]} -gt 0 ]; then
	echo "building ${need[*]} $KUBE_VERSION (about 6 minutes and 3 GiB cold)" >&2
	# The version variables that Kubernetes' own build (hack/lib/version.sh) sets; without them
	# the binaries report v0.0.0-master and clients refuse some version-gated behaviour.
	minor=${KUBE_VERSION#v*.}
	minor=${minor%%.*}
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	pkgs=()
	for c in "${need[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	(cd "$root/test/cluster/tools" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ld" -o "$work/" "${pkgs[@]}")
	for c in "${need[@]}"; do
		if [ "$c" = kubectl ]; then out=$("$work/$c" version --client 2>&1); else out=$("$work/$c" --version 2>&1); fi
		grep -q "$KUBE_VERSION\$" <<<"$out" || { echo "$c: unexpected version: $out" >&2; exit 1; }
		install_bin "$c" "$KUBE_VERSION"
	done
fi

if ! current etcd "$ETCD_VERSION"; then
	echo "building etcd $ETCD_VERSION (about 1 minute cold)" >&2
	(cd "$root/test/cluster/tools/etcd" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3)
	out=$("$work/etcd" --version 2>&1)
	grep -q "^etcd Version: ${ETCD_VERSION#v}$" <<<"$out" || { echo "etcd: unexpected version: $out" >&2; exit 1; }
	install_bin etcd "$ETCD_VERSION"
fi

as=sigs.k8s.io/agent-sandbox
if ! current agent-sandbox-controller "$AGENT_SANDBOX_VERSION"; then
	echo "building agent-sandbox-controller $AGENT_SANDBOX_VERSION (about 1.5 minutes cold)" >&2
	(cd "$root/test/cluster/tools/agentsandbox" && CGO_ENABLED=0 "$GO" build -trimpath \
		-ldflags "-s -w -X $as/internal/version.gitVersion=$AGENT_SANDBOX_VERSION" \
		-o "$work/agent-sandbox-controller" "$as/cmd/agent-sandbox-controller")
	out=$("$work/agent-sandbox-controller" --version 2>&1)
	grep -q "$AGENT_SANDBOX_VERSION" <<<"$out" || { echo "agent-sandbox-controller: unexpected version: $out" >&2; exit 1; }
	install_bin agent-sandbox-controller "$AGENT_SANDBOX_VERSION"
fi
# Its CRDs, from the same pinned source tree (go.sum), where TestAgentSandbox applies them.
crds=$bin/../agent-sandbox-crds
if [ "$(cat "$crds/version" 2>/dev/null)" != "$AGENT_SANDBOX_VERSION" ]; then
	src=$(cd "$root/test/cluster/tools/agentsandbox" && "$GO" mod download "$as" && "$GO" list -m -f '{{.Dir}}' "$as")
	[ -n "$src" ] && [ -d "$src/k8s/crds" ] || { echo "agent-sandbox CRDs not found in $src" >&2; exit 1; }
	rm -rf "$crds" && mkdir -p "$crds" && cp "$src"/k8s/crds/*.yaml "$crds/" && chmod 644 "$crds"/*.yaml
	echo "$AGENT_SANDBOX_VERSION" >"$crds/version"
fi

echo "$bin"
