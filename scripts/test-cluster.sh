#!/usr/bin/env bash
# Brings the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
# on 127.0.0.1, built by scripts/kube-tools.sh) up in DIR, left running, or ends the one
# running in DIR. `up` prints KUBECONFIG=DIR/admin.kubeconfig; every file stays in DIR.
#
# usage: scripts/test-cluster.sh up|down DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 up|down DIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$2"
dir=$(cd "$2" && pwd)
if [ "$1" = up ]; then "$root/scripts/kube-tools.sh" >/dev/null; fi
cd "$root/test/cluster/harness"
exec go run ./cmd/test-cluster "$1" "$dir"
