package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/clusterfront"
	"github.com/moatdev/moat/internal/kubeapi"
	"github.com/spf13/cobra"
)

// clusterServeFlags are serve's flags for the cluster front (docs/cluster.md).
type clusterServeFlags struct {
	kubeconfig, namespace, keys, nodeKeys string
	createTimeout                         time.Duration
}

func (f *clusterServeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "cluster", "", "serve as the cluster front instead of a daemon: `KUBECONFIG` (or in-cluster, for a Pod's service account) of the Kubernetes cluster whose moat nodes (moat-kubelet) run the sandboxes; creates become Pods there and requests go to the node that runs the sandbox (docs/cluster.md). Needs --listen, --cluster-keys and --cluster-node-keys")
	cmd.Flags().StringVar(&f.namespace, "cluster-namespace", "", "with --cluster: the namespace of the sandboxes' Pods (default: the kubeconfig context's or the service account's, else moat)")
	cmd.Flags().StringVar(&f.keys, "cluster-keys", "", "with --cluster: `FILE` of the front's API keys, one per line: OWNER SHA256-OF-KEY [admin] [secrets=NAME,...] (re-read when it changes: mount it from a Secret)")
	cmd.Flags().StringVar(&f.nodeKeys, "cluster-node-keys", "", "with --cluster: `FILE` of the nodes' daemon keys, one per line: NODE-NAME API-KEY (* for any node); each an admin key of that node's moat serve (moat apikey create --admin)")
	cmd.Flags().DurationVar(&f.createTimeout, "cluster-create-timeout", 2*time.Minute, "with --cluster: how long a create may wait for its Pod to be placed and its sandbox to run")
}

// given reports whether any cluster flag is set; then serve runs the front.
func (f *clusterServeFlags) given(cmd *cobra.Command) bool {
	for _, n := range []string{"cluster", "cluster-namespace", "cluster-keys", "cluster-node-keys", "cluster-create-timeout"} {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// serve runs the cluster front on listen until ctx ends.
func (f *clusterServeFlags) serve(ctx context.Context, a *app, listen string, e2bTemplates map[string]string, previewDomain string) error {
	switch {
	case f.kubeconfig == "":
		return errors.New("--cluster-namespace, --cluster-keys, --cluster-node-keys and --cluster-create-timeout go with --cluster KUBECONFIG")
	case listen == "":
		return errors.New("--cluster needs --listen ADDR: the front serves its API on TCP")
	case f.keys == "" || f.nodeKeys == "":
		return errors.New("--cluster needs --cluster-keys FILE (the front's API keys) and --cluster-node-keys FILE (the nodes' daemon keys)")
	case f.createTimeout < time.Second:
		return fmt.Errorf("--cluster-create-timeout %s: at least 1s", f.createTimeout)
	}
	var cfg kubeapi.Config
	var err error
	if f.kubeconfig == "in-cluster" {
		cfg, err = kubeapi.InCluster()
	} else {
		cfg, err = kubeapi.LoadKubeconfig(f.kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("--cluster %s: %w", f.kubeconfig, err)
	}
	kc, err := kubeapi.New(cfg)
	if err != nil {
		return fmt.Errorf("--cluster %s: %w", f.kubeconfig, err)
	}
	ns := f.namespace
	if ns == "" {
		ns = cfg.Namespace
	}
	if ns == "" {
		ns = "moat"
	}
	if e2bTemplates == nil {
		e2bTemplates = apiserver.DefaultE2BTemplates()
	}
	log := a.logger(os.Stderr)
	front, err := clusterfront.New(clusterfront.Config{Kube: kc, Namespace: ns, CallerKeys: f.keys, NodeKeys: f.nodeKeys,
		E2BTemplates: e2bTemplates, CreateTimeout: f.createTimeout, PreviewDomain: previewDomain, Log: log})
	if err != nil {
		return err
	}
	// The API server answers before the front takes traffic: a wrong kubeconfig fails here.
	if _, err := kc.ListPods(ctx, ns, clusterfront.LabelFront+"=true"); err != nil {
		return fmt.Errorf("--cluster %s: listing Pods in namespace %s: %w", f.kubeconfig, ns, err)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: front, ReadHeaderTimeout: 30 * time.Second}
	go front.Reap(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("cluster front serving", "listen", l.Addr().String(), "namespace", ns, "server", cfg.Server)
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// parseE2BTemplates parses --e2b-template NAME=TEMPLATE flags (nil when none are given).
func parseE2BTemplates(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range list {
		alias, tmpl, ok := strings.Cut(kv, "=")
		if !ok || alias == "" || tmpl == "" {
			return nil, fmt.Errorf("--e2b-template %q: want E2B_NAME=MOAT_TEMPLATE, e.g. base=debian", kv)
		}
		out[alias] = tmpl
	}
	return out, nil
}
