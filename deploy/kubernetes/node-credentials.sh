#!/usr/bin/env bash
# Makes a moat host's node credentials with the cluster's own CA, through two
# CertificateSigningRequests that an admin approves (this script approves them with the
# admin credentials it runs under):
#   OUT/kubeconfig        client certificate of user system:node:NODE, group system:nodes
#                         (signer kubernetes.io/kube-apiserver-client-kubelet): the Node
#                         authorizer and NodeRestriction then let it touch its own Node,
#                         Lease and the Pods bound to it, and nothing else
#   OUT/serving.crt/.key  serving certificate of the agent's kubelet API for HOST-IP
#                         (signer kubernetes.io/kubelet-serving)
#   OUT/client-ca.crt     the cluster CA, as the CA of the API server's kubelet client
#                         certificate (kubeadm: the same CA; set CLIENT_CA=FILE otherwise)
# Private keys are made here and never leave OUT (mode 0600). Run it on the host, or copy
# OUT to /etc/moat/kubelet/ on the host. The certificates expire (the controller manager's
# --cluster-signing-duration, 1 year by default): run it again before they do.
#
# usage: KUBECONFIG=admin.kubeconfig deploy/kubernetes/node-credentials.sh NODE HOST-IP OUT
#   NODE: the moat Node's name (node-agent.yaml: moat-<real node name>)
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 NODE HOST-IP OUT" >&2; exit 2; }
node=$1 ip=$2 out=$3
kubectl=${KUBECTL:-kubectl}
command -v "$kubectl" >/dev/null || kubectl=/var/cache/moat-kube/v1.37.2/bin/kubectl
k() { "$kubectl" "$@"; }
umask 077
mkdir -p "$out"

# sign NAME SIGNER USAGES OPENSSL-EXTRA...: key OUT/NAME.key, certificate OUT/NAME.crt
sign() {
	local name=$1 signer=$2 usages=$3 csr
	shift 3
	openssl ecparam -name prime256v1 -genkey -noout -out "$out/$name.key"
	csr=$(openssl req -new -key "$out/$name.key" -subj "/O=system:nodes/CN=system:node:$node" "$@" | base64 | tr -d '\n')
	k delete csr "$node-$name" --ignore-not-found >/dev/null
	k apply -f - >/dev/null <<YAML
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: $node-$name
spec:
  request: $csr
  signerName: $signer
  usages: [$usages]
YAML
	k certificate approve "$node-$name" >/dev/null
	for _ in $(seq 60); do
		c=$(k get csr "$node-$name" -o jsonpath='{.status.certificate}')
		if [ -n "$c" ]; then
			printf %s "$c" | base64 -d >"$out/$name.crt"
			k delete csr "$node-$name" >/dev/null
			return
		fi
		sleep 1
	done
	echo "CSR $node-$name approved but not signed after 60 s: does the controller manager run the csrsigning controller with --cluster-signing-cert-file/--cluster-signing-key-file?" >&2
	exit 1
}
sign client kubernetes.io/kube-apiserver-client-kubelet '"digital signature", "client auth"'
sign serving kubernetes.io/kubelet-serving '"digital signature", "server auth"' -addext "subjectAltName=IP:$ip"

server=$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
k config view --minify --raw --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$out/ca.crt"
if [ -n "${CLIENT_CA:-}" ]; then cp "$CLIENT_CA" "$out/client-ca.crt"; else cp "$out/ca.crt" "$out/client-ca.crt"; fi
KUBECONFIG=$out/kubeconfig k config set-cluster cluster --server="$server" --certificate-authority="$out/ca.crt" --embed-certs >/dev/null
KUBECONFIG=$out/kubeconfig k config set-credentials "system:node:$node" --client-certificate="$out/client.crt" --client-key="$out/client.key" --embed-certs >/dev/null
KUBECONFIG=$out/kubeconfig k config set-context node --cluster=cluster --user="system:node:$node" >/dev/null
KUBECONFIG=$out/kubeconfig k config use-context node >/dev/null
rm -f "$out/client.crt" "$out/client.key"   # embedded in the kubeconfig
echo "wrote $out/{kubeconfig,serving.crt,serving.key,client-ca.crt,ca.crt} for system:node:$node"
