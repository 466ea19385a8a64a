#!/usr/bin/env bash
# Runs the examples of this directory on one real moat node on this machine: the project's
# test control plane (with the CSR signer on), `moat serve`, and moat-kubelet with
# credentials from node-credentials.sh (no Secret grant). Then: the sandbox Pods of
# sandbox-pod-example.yaml (image swapped for the local template `host`, so nothing is
# pulled) run, show their output through `kubectl logs`, answer `kubectl exec`, and their
# main process still runs after 35 s; with $AGENT_SANDBOX_CONTROLLER (a built
# agent-sandbox-controller binary) agent-sandbox-example.yaml too (CRDs from the Go module
# cache), its SandboxClaim Ready. Everything is torn down at exit; nothing leaves loopback.
#
# usage (root; after `make build`, bin/ holding moat, moat-init and moat-kubelet):
#   [AGENT_SANDBOX_CONTROLLER=/path/agent-sandbox-controller] deploy/kubernetes/try-local.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/deploy/kubernetes
bin=${MOAT_BIN:-$root/bin}
k=${KUBECTL:-/var/cache/moat-kube/v1.37.2/bin/kubectl}
work=$(mktemp -d /tmp/moat-try-local.XXXXXX)
chmod 755 "$work" # sandboxes run as other uids and must reach their files under it
kc=$work/kc
export KUBECONFIG=$kc/admin.kubeconfig
pids=()
cleanup() {
	set +e
	if [ -f "$KUBECONFIG" ]; then
		"$k" delete -f "$work/as.yaml" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
		"$k" delete -f "$work/pods.yaml" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
	fi
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null
		wait "${pids[i]}" 2>/dev/null
	done
	[ -d "$kc" ] && "$root/scripts/test-cluster.sh" down "$kc" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in daemon kubelet controller; do
		[ -f "$work/$f.log" ] && { echo "--- $f.log (last 15 lines)" >&2; tail -15 "$work/$f.log" | cut -c1-400 >&2; }
	done
	exit 1
}

MOAT_KUBE_APISERVER_ARGS=--allow-privileged=true \
MOAT_KUBE_CONTROLLER_MANAGER_ARGS="--controllers=csrsigning --cluster-signing-cert-file=$kc/pki/ca.crt --cluster-signing-key-file=$kc/pki/ca.key" \
	"$root/scripts/test-cluster.sh" up "$kc" >/dev/null
"$k" delete clusterrolebinding moat-test:node-informers >/dev/null # the harness's Secret grant: not needed

# A uid range of its own, held the way the project's tests hold theirs (testutil.IDBase).
python3 -c '
import socket, sys, time
for k in range(119, -1, -1):
    s = socket.socket(socket.AF_UNIX)
    try: s.bind("\0moat-test-idbase-%d" % k)
    except OSError: continue
    print(k, flush=True); time.sleep(86400)
sys.exit(1)' >"$work/idbase" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/idbase" ] && break; sleep 0.1; done
idbase=$((0x80000000 + $(cat "$work/idbase") * 256 * 65536))
mkdir -p "$work/data" "$work/run"
"$bin/moat" --data "$work/data" --run-dir "$work/run" --socket "$work/run/moat.sock" --id-base "$idbase" \
	serve --warm 0 --default-disk 1G >"$work/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$work/run/moat.sock" ] && break; sleep 0.2; done

KUBECTL=$k "$here/node-credentials.sh" moat-local 127.0.0.1 "$work/creds" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin/moat-kubelet" --kubeconfig "$work/creds/kubeconfig" --node-name moat-local --socket "$work/run/moat.sock" \
	--listen "127.0.0.1:$port" --tls-cert "$work/creds/serving.crt" --tls-key "$work/creds/serving.key" \
	--client-ca "$work/creds/client-ca.crt" --max-sandboxes 20 >"$work/kubelet.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do "$k" get node moat-local >/dev/null 2>&1 && break; sleep 1; done
"$k" wait --for=condition=Ready node/moat-local --timeout=60s >/dev/null || fail "node moat-local not Ready"

"$k" apply -f "$here/namespace.yaml" -f "$here/runtimeclasses.yaml" >/dev/null
sed 's/image: debian$/image: host/' "$here/sandbox-pod-example.yaml" >"$work/pods.yaml"
"$k" apply -f "$work/pods.yaml" >/dev/null
"$k" wait --for=condition=Ready pod/sandbox-example pod/sandbox-example-gvisor --timeout=60s >/dev/null ||
	fail "example Pods not Ready: $("$k" get pods -o wide)"
[ "$("$k" logs sandbox-example)" = ready ] || fail "kubectl logs: $("$k" logs sandbox-example)"
[ "$("$k" exec sandbox-example -- sh -c 'echo $TASK')" = example ] || fail "kubectl exec"
echo "ok: sandbox Pods Running on moat-local (runc and runsc), logs and exec work"
sleep 35
phase=$("$k" get pod sandbox-example -o jsonpath='{.status.phase}')
[ "$phase" = Running ] || fail "sandbox-example is $phase 35 s later: $("$k" get pod sandbox-example -o jsonpath='{.status.containerStatuses[0].state}')"
echo "ok: its main process still runs 35 s later"

if [ -n "${AGENT_SANDBOX_CONTROLLER:-}" ]; then
	"$k" apply -f "$(go env GOMODCACHE)/sigs.k8s.io/agent-sandbox@v1.0.1/k8s/crds" >/dev/null
	"$k" wait --for condition=Established --timeout=30s crd/sandboxes.agents.x-k8s.io \
		crd/sandboxclaims.extensions.agents.x-k8s.io crd/sandboxtemplates.extensions.agents.x-k8s.io \
		crd/sandboxwarmpools.extensions.agents.x-k8s.io >/dev/null
	"$AGENT_SANDBOX_CONTROLLER" --kubeconfig "$KUBECONFIG" --extensions --leader-elect=false \
		--metrics-bind-address=0 --health-probe-bind-address=127.0.0.1:0 >"$work/controller.log" 2>&1 &
	pids+=($!)
	"$k" delete -f "$work/pods.yaml" --wait=true --timeout=60s >/dev/null # free the node's CPUs
	sed 's/image: debian\( *#.*\)\{0,1\}$/image: host/' "$here/agent-sandbox-example.yaml" >"$work/as.yaml"
	"$k" apply -f "$work/as.yaml" >/dev/null
	"$k" wait --for=condition=Ready sandboxclaim/agent-task-1 sandbox/agent-direct --timeout=90s >/dev/null ||
		fail "agent-sandbox objects not Ready: $("$k" get sandboxclaims,sandboxes,pods -o wide)"
	[ "$("$k" get pod agent-task-1 -o jsonpath='{.spec.nodeName}')" = moat-local ] || fail "claim's Pod not on moat-local"
	echo "ok: SandboxClaim and Sandbox Ready, their Pods sandboxes on moat-local"
fi
"$k" delete -f "$work/pods.yaml" --ignore-not-found --wait=true --timeout=60s >/dev/null
[ -f "$work/as.yaml" ] && "$k" delete -f "$work/as.yaml" --wait=true --timeout=60s >/dev/null
# The claim's and the Sandbox's Pods go by garbage collection, after their grace period.
"$k" wait --for=delete pod --all --timeout=60s >/dev/null 2>&1 || true
for _ in $(seq 20); do
	left=$("$bin/moat" --socket "$work/run/moat.sock" ls -q 2>/dev/null | wc -l)
	[ "$left" = 0 ] && break
	sleep 0.5
done
[ "$left" = 0 ] || fail "$left sandboxes left at the daemon after the Pods were deleted"
echo "ok: every Pod deleted, no sandbox left"
