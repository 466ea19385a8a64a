package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/testutil"
)

// TestClusterServeErrors: moat serve --cluster refuses what it cannot run with, naming
// the flag, before it starts anything. (A working front: kube/clustertest's
// TestClusterFront, make test-cluster.)
func TestClusterServeErrors(t *testing.T) {
	bin := filepath.Join(testutil.Binaries(t), "moat")
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys := write("keys", "alice "+strings.Repeat("ab", 32)+"\n")
	nodeKeys := write("node-keys", "* k\n")
	plain := write("plain.kubeconfig", "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n")
	good := write("good.kubeconfig", strings.Replace(string(must(os.ReadFile(plain))), "http://", "https://", 1))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-keys", keys}, "go with --cluster"},
		{[]string{"--cluster", good, "--cluster-keys", keys, "--cluster-node-keys", nodeKeys}, "needs --listen"},
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0"}, "--cluster-keys"},
		{[]string{"--cluster", filepath.Join(dir, "none"), "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", nodeKeys}, "--cluster " + filepath.Join(dir, "none")},
		{[]string{"--cluster", plain, "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", nodeKeys}, "http"},
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0", "--cluster-keys", write("bad-keys", "alice nothex\n"), "--cluster-node-keys", nodeKeys}, "--cluster-keys"},
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", write("bad-node-keys", "only-a-name\n")}, "--cluster-node-keys"},
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", nodeKeys, "--cluster-create-timeout", "1ms"}, "--cluster-create-timeout"},
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", nodeKeys, "--e2b-template", "base"}, "--e2b-template"},
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", nodeKeys, "--allow-public-ports"}, "--allow-public-ports"},
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", nodeKeys, "--preview-domain", "*.bad"}, "--preview-domain"},
		// Everything given, but no API server answers: refused before serving.
		{[]string{"--cluster", good, "--listen", "127.0.0.1:0", "--cluster-keys", keys, "--cluster-node-keys", nodeKeys}, "listing Pods"},
	} {
		cmd := exec.Command(bin, append([]string{"--data", t.TempDir(), "serve"}, c.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("serve %v: %v %s, want an error naming %q", c.args, err, out, c.want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
