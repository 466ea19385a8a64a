package harness

import (
	"fmt"
	"os"
	"strconv"
)

// writeKubeconfig writes a kubeconfig with one cluster, user and context, naming the
// certificate files by absolute path (a file client-go, kubectl and virtual-kubelet all read).
func writeKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	q := strconv.Quote
	s := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: moat-test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: moat-test
  context:
    cluster: moat-test
    user: %s
current-context: moat-test
`, q(server), q(caFile), q(user), q(certFile), q(keyFile), q(user))
	return os.WriteFile(path, []byte(s), 0o600)
}
