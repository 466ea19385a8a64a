// Command test-cluster brings the test control plane up in a directory, detached, or ends
// the one running there; scripts/test-cluster.sh runs it.
//
// usage: test-cluster up|down DIR
//
// $MOAT_KUBE_APISERVER_ARGS and $MOAT_KUBE_CONTROLLER_MANAGER_ARGS (space-separated) add
// flags to kube-apiserver and kube-controller-manager, e.g. --allow-privileged=true to
// dry-run privileged Pods (deploy/kubernetes/validate.sh), or the CSR signer's flags.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/moatdev/moat/test/cluster/harness"
)

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: test-cluster up|down DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(verb, dir string) error {
	if verb == "down" {
		c, err := harness.Load(dir)
		if err != nil {
			return err
		}
		return c.Down()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := harness.Up(ctx, harness.Options{Dir: dir, Detach: true,
		ExtraArgs: map[string][]string{
			"kube-apiserver":          strings.Fields(os.Getenv("MOAT_KUBE_APISERVER_ARGS")),
			"kube-controller-manager": strings.Fields(os.Getenv("MOAT_KUBE_CONTROLLER_MANAGER_ARGS")),
		},
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		return err
	}
	fmt.Printf("KUBECONFIG=%s\n", c.AdminKubeconfig)
	fmt.Fprintf(os.Stderr, "test cluster up in %v: %s (kubectl: %s/kubectl)\n", c.BringUp().Round(time.Millisecond), c.Server, c.BinDir)
	return nil
}
