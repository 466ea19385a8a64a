// Command moat-kubelet registers a moat host as a Kubernetes node: Pods the scheduler
// binds to it (those tolerating moat.dev/sandbox=true:NoSchedule) run as sandboxes of the
// local moat daemon, reached through the sdk over its unix socket (or TCP with an API key
// in $MOAT_API_KEY). It serves the kubelet API (exec, logs) on --listen with a serving
// certificate, to clients whose certificate the --client-ca signed and whose common
// name is in --allow-cn (the API server's kubelet client).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moatdev/moat/kube/moatnode"
	"github.com/moatdev/moat/sdk"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type config struct {
	kubeconfig, nodeName, socket, moatURL   string
	listen, internalIP, cert, key, clientCA string
	allowCN                                 string
	slots                                   int64
	doctorPeriod                            time.Duration
	daemonURL                               string
	dataDir                                 string
	qps                                     float64
	burst                                   int
}

func main() {
	var c config
	flag.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the node's identity (system:node:NAME)")
	flag.StringVar(&c.nodeName, "node-name", "", "the Node's name (default: the host name)")
	flag.StringVar(&c.socket, "socket", sdk.DefaultSocket, "the moat daemon's unix socket")
	flag.StringVar(&c.moatURL, "moat-url", "", "the moat daemon's TCP address instead of the socket (API key in $MOAT_API_KEY)")
	flag.StringVar(&c.listen, "listen", "127.0.0.1:10250", "address of the kubelet API (exec, logs)")
	flag.StringVar(&c.internalIP, "internal-ip", "", "the node's InternalIP (default: the --listen host)")
	flag.StringVar(&c.cert, "tls-cert", "", "serving certificate of the kubelet API (PEM)")
	flag.StringVar(&c.key, "tls-key", "", "its key (PEM)")
	flag.StringVar(&c.clientCA, "client-ca", "", "CA whose client certificates may call the kubelet API")
	flag.StringVar(&c.allowCN, "allow-cn", "kube-apiserver-kubelet-client", "comma-separated client certificate common names allowed on the kubelet API")
	flag.Int64Var(&c.slots, "max-sandboxes", 110, "Pod capacity: sandboxes this node runs at once")
	flag.DurationVar(&c.doctorPeriod, "doctor-period", 30*time.Second, "how often node conditions are refreshed from moat doctor")
	flag.StringVar(&c.daemonURL, "daemon-url", "", "the daemon's TCP API as the cluster front reaches it (moat serve --listen), e.g. http://10.0.0.5:7070; published on the Node as moat.dev/daemon-url")
	flag.StringVar(&c.dataDir, "data", "/var/lib/moat", "the daemon's data directory: the size of its filesystem is the node's ephemeral-storage capacity (sandbox drives)")
	flag.Float64Var(&c.qps, "kube-api-qps", 20, "requests per second to the Kubernetes API server (client-go's default, 5, allows about one sandbox create and delete a second)")
	flag.IntVar(&c.burst, "kube-api-burst", 40, "burst of requests to the Kubernetes API server")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = vklog.WithLogger(ctx, moatnode.VKLogger(log))
	if err := run(ctx, c, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("moat-kubelet", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.nodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return err
		}
		c.nodeName = h
	}
	host, portS, err := net.SplitHostPort(c.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("--listen port: %w", err)
	}
	if c.internalIP == "" {
		c.internalIP = host
	}
	if c.cert == "" || c.key == "" || c.clientCA == "" {
		return errors.New("--tls-cert, --tls-key and --client-ca are required")
	}
	if u, err := url.Parse(c.daemonURL); c.daemonURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return fmt.Errorf("--daemon-url %q: want http(s)://HOST:PORT of the daemon's moat serve --listen", c.daemonURL)
	}
	mc := sdk.NewUnix(c.socket)
	if c.moatURL != "" {
		mc = sdk.NewHTTP(c.moatURL, os.Getenv("MOAT_API_KEY"))
	}
	var doc moatnode.Doctor
	if err := mc.Doctor(ctx, &doc); err != nil {
		return fmt.Errorf("asking the moat daemon: %w", err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if c.qps <= 0 || c.burst <= 0 {
		return errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	rc.QPS, rc.Burst = float32(c.qps), c.burst
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	spec := moatnode.NodeSpec(moatnode.NodeShape{
		Name: c.nodeName, InternalIP: c.internalIP, Port: int32(port),
		CPUs: int64(runtime.NumCPU()), Memory: hostMemory(), Slots: c.slots, Disk: diskSize(c.dataDir), Version: "v1.37.2-moat",
		DaemonURL: c.daemonURL,
	}, doc)
	spec.Status.Conditions = moatnode.NodeConditions(doc, time.Now())
	prov := moatnode.NewProvider(mc, c.nodeName, c.internalIP, log)
	n, err := prov.Adopt(ctx)
	if err != nil {
		return err
	}
	log.Info("sandboxes found for adoption", "node", c.nodeName, "count", n)
	allowed := strings.Split(c.allowCN, ",")
	mux := http.NewServeMux()
	nd, err := nodeutil.NewNode(c.nodeName,
		func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
			*pc.Node = spec
			return prov, moatnode.NewNodeProvider(mc, pc.Node, c.doctorPeriod, log), nil
		},
		nodeutil.WithClient(kc),
		func(cfg *nodeutil.NodeConfig) error {
			cfg.HTTPListenAddr = c.listen
			cfg.SkipDownwardAPIResolution = true // never resolve Secrets into a sandbox
			cfg.NumWorkers = 4
			cfg.Handler = clientCNGate(allowed, mux)
			return nil
		},
		nodeutil.AttachProviderRoutes(mux),
		nodeutil.WithTLSConfig(nodeutil.WithKeyPairFromPath(c.cert, c.key), nodeutil.WithCAFromPath(c.clientCA)),
	)
	if err != nil {
		return err
	}
	go func() {
		if err := nd.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("node", "err", err)
		}
	}()
	if err := nd.WaitReady(ctx, time.Minute); err != nil {
		return fmt.Errorf("node not ready: %w", err)
	}
	log.Info("node ready", "node", c.nodeName, "listen", c.listen)
	<-nd.Done()
	return nd.Err()
}

// clientCNGate passes requests whose verified client certificate's common name is in
// allowed; others get 403. (The TLS layer has already verified the chain to --client-ca.)
func clientCNGate(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !clientAllowed(r.TLS, allowed) {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// clientAllowed says whether a connection's verified leaf certificate names an allowed
// common name. Pure.
func clientAllowed(cs *tls.ConnectionState, allowed []string) bool {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return false
	}
	cn := cs.VerifiedChains[0][0].Subject.CommonName
	return cn != "" && slices.Contains(allowed, cn)
}

// hostMemory is the host's memory in bytes (/proc/meminfo), or 0.
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// diskSize is the size of the filesystem holding dir (or of / when dir does not exist),
// or 0.
func diskSize(dir string) int64 {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil && syscall.Statfs("/", &st) != nil {
		return 0
	}
	return int64(st.Blocks) * st.Bsize
}
