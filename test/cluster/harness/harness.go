// Package harness brings up a real, local Kubernetes control plane for tests: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler of the pinned release that
// scripts/kube-tools.sh builds, all on 127.0.0.1 with free ports, every file under one
// directory. Down ends every process it started and leaves nothing outside that directory.
//
// A test:
//
//	c, err := harness.Up(ctx, harness.Options{Dir: t.TempDir(), Logf: t.Logf})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(func() { c.Down() })
//	node, err := c.Node("moat-a") // kubeconfig as system:node:moat-a
package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The release scripts/kube-tools.sh builds; Up runs the binaries of DefaultBinDir.
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.7.3"
)

// DefaultBinDir is $MOAT_KUBE_BIN, else the bin directory of scripts/kube-tools.sh's cache
// ($MOAT_KUBE_CACHE, default /var/cache/moat-kube) for KubeVersion.
func DefaultBinDir() string {
	if d := os.Getenv("MOAT_KUBE_BIN"); d != "" {
		return d
	}
	cache := os.Getenv("MOAT_KUBE_CACHE")
	if cache == "" {
		cache = "/var/cache/moat-kube"
	}
	return filepath.Join(cache, KubeVersion, "bin")
}

// Options configure Up.
type Options struct {
	// Dir holds certificates, kubeconfigs, etcd's data and the logs (required; a test's
	// t.TempDir()).
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
	// (default DefaultBinDir()).
	BinDir string
	// Logf, if set, receives progress lines (t.Logf).
	Logf func(format string, args ...any)
	// ExtraArgs are appended to a component's flags, by binary name, e.g.
	// {"kube-controller-manager": {"--node-monitor-grace-period=10s"}}.
	ExtraArgs map[string][]string
	// Controllers are the controller manager's --controllers (default DefaultControllers;
	// {"*"} runs all of its on-by-default controllers, which adds about 5 s to bring-up).
	Controllers []string
	// Detach lets the processes outlive the calling process (scripts/test-cluster.sh up); a
	// later Load(Dir).Down() ends them. Otherwise they are killed if the caller dies.
	Detach bool
}

// DefaultControllers are the controllers a test of a node agent needs: default service
// accounts and their tokens, the kube-root-ca.crt ConfigMap, node lifecycle (the not-ready
// and unreachable taints and the evictions they cause), garbage collection of owned and
// orphaned objects, namespace deletion, and Deployments, ReplicaSets and EndpointSlices.
var DefaultControllers = []string{
	"serviceaccount-controller", "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	"node-lifecycle-controller", "taint-eviction-controller", "pod-garbage-collector-controller",
	"garbage-collector-controller", "namespace-controller",
	"deployment-controller", "replicaset-controller", "endpointslice-controller",
}

// Cluster is a running control plane. Its exported fields are also written to
// Dir/cluster.json, which Load reads.
type Cluster struct {
	Dir             string
	BinDir          string
	Server          string // https://127.0.0.1:PORT
	CAFile          string // the CA that signs every certificate, client and serving
	AdminKubeconfig string // user moat-test-admin in group system:masters
	EtcdURL         string
	Procs           []Proc
	Stages          []Stage // how long each step of Up took

	mu     sync.Mutex
	exited map[string]chan struct{} // processes this Cluster started, closed when reaped
	ca     *ca
}

// Proc is one control-plane process.
type Proc struct {
	Name string
	Pid  int
	Path string
	Log  string
}

// Stage is one timed step of Up.
type Stage struct {
	Name     string
	Duration time.Duration
}

// BringUp is the whole time Up took.
func (c *Cluster) BringUp() time.Duration {
	var d time.Duration
	for _, s := range c.Stages {
		d += s.Duration
	}
	return d
}

type ports struct{ etcd, etcdPeer, apiserver, kcm, scheduler int }

// Up starts etcd and kube-apiserver, waits until the API server is ready, makes the RBAC
// bindings below, starts the controller manager and the scheduler, and returns once the
// default service account exists and the scheduler is healthy. On error it has ended
// whatever it started, and the error carries the tail of each component's log.
//
// RBAC made at bring-up: group system:nodes may get, list and watch secrets and configmaps
// (virtual-kubelet's informers list them cluster-wide, which the Node authorizer alone
// refuses); kube-apiserver's kubelet client certificate (user kube-apiserver-kubelet-client)
// has system:kubelet-api-admin, for a node agent that authorizes its kubelet API by
// SubjectAccessReview.
func Up(ctx context.Context, o Options) (_ *Cluster, err error) {
	if o.Dir == "" {
		return nil, errors.New("harness: Options.Dir is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if prev, err := Load(dir); err == nil && prev.running() {
		return nil, fmt.Errorf("harness: a cluster already runs in %s (scripts/test-cluster.sh down %s)", dir, dir)
	}
	bin := o.BinDir
	if bin == "" {
		bin = DefaultBinDir()
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("harness: %s not in %s (run scripts/kube-tools.sh): %w", b, bin, err)
		}
	}
	controllers := o.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	for _, d := range []string{"pki", "logs", "etcd", "nodes"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Dir: dir, BinDir: bin, exited: map[string]chan struct{}{}}
	defer func() {
		if err != nil {
			tails := c.logTails()
			_ = c.Down()
			err = fmt.Errorf("harness: %w%s", err, tails)
		}
	}()
	t0 := time.Now()
	stage := func(name string) {
		now := time.Now()
		c.Stages = append(c.Stages, Stage{name, now.Sub(t0)})
		logf("test cluster: %s in %v", name, now.Sub(t0).Round(time.Millisecond))
		t0 = now
	}

	// Certificates and keys.
	pki := filepath.Join(dir, "pki")
	if c.ca, err = newCA(pki); err != nil {
		return nil, err
	}
	c.CAFile = filepath.Join(pki, "ca.crt")
	loop := []net.IP{net.IPv4(127, 0, 0, 1)}
	type issued struct{ cert, key string }
	certs := map[string]issued{}
	for name, s := range map[string]CertSpec{
		"apiserver": {CommonName: "kube-apiserver", Server: true, IPs: append(loop, net.IPv4(10, 0, 0, 1)),
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		"apiserver-kubelet-client": {CommonName: "kube-apiserver-kubelet-client", Client: true},
		"admin":                    {CommonName: "moat-test-admin", Organizations: []string{"system:masters"}, Client: true},
		"controller-manager":       {CommonName: "system:kube-controller-manager", Client: true},
		"scheduler":                {CommonName: "system:kube-scheduler", Client: true},
		"controller-manager-serving": {CommonName: "kube-controller-manager", Server: true, IPs: loop,
			DNSNames: []string{"localhost"}},
		"scheduler-serving": {CommonName: "kube-scheduler", Server: true, IPs: loop, DNSNames: []string{"localhost"}},
	} {
		cf, kf, err := c.ca.issue(filepath.Join(pki, name), s)
		if err != nil {
			return nil, err
		}
		certs[name] = issued{cf, kf}
	}
	saPub, saKey, err := writeKeyPair(filepath.Join(pki, "service-account"))
	if err != nil {
		return nil, err
	}
	p, err := freePorts()
	if err != nil {
		return nil, err
	}
	c.Server = "https://127.0.0.1:" + strconv.Itoa(p.apiserver)
	c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(p.etcd)
	kc := map[string]string{}
	for _, u := range []struct{ name, user string }{
		{"admin", "moat-test-admin"},
		{"controller-manager", "system:kube-controller-manager"},
		{"scheduler", "system:kube-scheduler"},
	} {
		kc[u.name] = filepath.Join(dir, u.name+".kubeconfig")
		if err := writeKubeconfig(kc[u.name], c.Server, c.CAFile, certs[u.name].cert, certs[u.name].key, u.user); err != nil {
			return nil, err
		}
	}
	c.AdminKubeconfig = kc["admin"]
	stage("certificates")

	// etcd and the API server.
	peer := "http://127.0.0.1:" + strconv.Itoa(p.etcdPeer)
	if err := c.start(o, "etcd",
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+c.EtcdURL, "--advertise-client-urls="+c.EtcdURL,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer,
		"--unsafe-no-fsync", // a test cluster's data dies with it
		"--log-level=warn",
	); err != nil {
		return nil, err
	}
	if err := c.start(o, "kube-apiserver",
		"--etcd-servers="+c.EtcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(p.apiserver),
		"--cert-dir="+filepath.Join(dir, "apiserver"),
		"--tls-cert-file="+certs["apiserver"].cert, "--tls-private-key-file="+certs["apiserver"].key,
		"--client-ca-file="+c.CAFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate="+certs["apiserver-kubelet-client"].cert,
		"--kubelet-client-key="+certs["apiserver-kubelet-client"].key,
		// The kubernetes Service's endpoints would name 127.0.0.1, which validation refuses.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	); err != nil {
		return nil, err
	}
	hc, err := c.adminClient()
	if err != nil {
		return nil, err
	}
	if err := c.waitFor(ctx, 90*time.Second, "kube-apiserver /readyz", func() error {
		return get(ctx, hc, c.Server+"/readyz")
	}); err != nil {
		return nil, err
	}
	stage("etcd and kube-apiserver ready")

	for _, obj := range bootstrapObjects {
		if err := post(ctx, hc, c.Server+obj.path, obj.body); err != nil {
			return nil, err
		}
	}

	// The controller manager (default service accounts, node lifecycle: the not-ready taint)
	// and the scheduler. Neither is given an authentication or authorization kubeconfig: their
	// own HTTPS ports then serve only /healthz, /readyz and /livez, which is all Up reads.
	if err := c.start(o, "kube-controller-manager",
		"--kubeconfig="+kc["controller-manager"],
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(p.kcm),
		"--cert-dir="+filepath.Join(dir, "controller-manager"),
		"--tls-cert-file="+certs["controller-manager-serving"].cert,
		"--tls-private-key-file="+certs["controller-manager-serving"].key,
		"--service-account-private-key-file="+saKey,
		"--root-ca-file="+c.CAFile,
		"--use-service-account-credentials=true",
		"--controllers="+strings.Join(controllers, ","),
		// Else it makes /usr/libexec/kubernetes/kubelet-plugins/volume/exec on the host.
		"--flex-volume-plugin-dir="+filepath.Join(dir, "flexvolume"),
		"--leader-elect=false",
		"--profiling=false",
	); err != nil {
		return nil, err
	}
	if err := c.start(o, "kube-scheduler",
		"--kubeconfig="+kc["scheduler"],
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(p.scheduler),
		"--cert-dir="+filepath.Join(dir, "scheduler"),
		"--tls-cert-file="+certs["scheduler-serving"].cert,
		"--tls-private-key-file="+certs["scheduler-serving"].key,
		"--leader-elect=false",
		"--profiling=false",
	); err != nil {
		return nil, err
	}
	if err := c.waitFor(ctx, 60*time.Second, "the default service account", func() error {
		return get(ctx, hc, c.Server+"/api/v1/namespaces/default/serviceaccounts/default")
	}); err != nil {
		return nil, err
	}
	if err := c.waitFor(ctx, 30*time.Second, "kube-scheduler /healthz", func() error {
		return get(ctx, hc, "https://127.0.0.1:"+strconv.Itoa(p.scheduler)+"/healthz")
	}); err != nil {
		return nil, err
	}
	stage("controller manager and scheduler ready")
	if err := c.save(); err != nil {
		return nil, err
	}
	return c, nil
}

// bootstrapObjects are posted once the API server is ready (see Up).
var bootstrapObjects = []struct{ path, body string }{
	{"/apis/rbac.authorization.k8s.io/v1/clusterroles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
		"metadata":{"name":"moat-test:node-informers"},
		"rules":[{"apiGroups":[""],"resources":["secrets","configmaps"],"verbs":["get","list","watch"]}]}`},
	{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
		"metadata":{"name":"moat-test:node-informers"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"moat-test:node-informers"},
		"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:nodes"}]}`},
	{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
		"metadata":{"name":"moat-test:apiserver-kubelet-client"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:kubelet-api-admin"},
		"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"kube-apiserver-kubelet-client"}]}`},
}

// NodeCreds are the credentials of one node: a client certificate for user system:node:NAME
// in group system:nodes (what the Node authorizer and NodeRestriction admit), also valid for
// serving on 127.0.0.1 and localhost (a kubelet API), and a kubeconfig naming it.
type NodeCreds struct {
	Name       string
	Kubeconfig string
	CertFile   string
	KeyFile    string
}

// Node makes (or returns the already made) credentials of node name, under Dir/nodes.
func (c *Cluster) Node(name string) (NodeCreds, error) {
	if err := ValidNodeName(name); err != nil {
		return NodeCreds{}, err
	}
	base := filepath.Join(c.Dir, "nodes", name)
	n := NodeCreds{Name: name, Kubeconfig: base + ".kubeconfig", CertFile: base + ".crt", KeyFile: base + ".key"}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := os.Stat(n.Kubeconfig); err == nil {
		return n, nil
	}
	a, err := c.loadedCA()
	if err != nil {
		return NodeCreds{}, err
	}
	if _, _, err := a.issue(base, CertSpec{
		CommonName: "system:node:" + name, Organizations: []string{"system:nodes"},
		Client: true, Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost", name},
	}); err != nil {
		return NodeCreds{}, err
	}
	if err := writeKubeconfig(n.Kubeconfig, c.Server, c.CAFile, n.CertFile, n.KeyFile, "system:node:"+name); err != nil {
		return NodeCreds{}, err
	}
	return n, nil
}

// IssueCert writes Dir/pki/NAME.crt and NAME.key, signed by the cluster's CA.
func (c *Cluster) IssueCert(name string, s CertSpec) (certFile, keyFile string, err error) {
	if err := ValidNodeName(name); err != nil {
		return "", "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.loadedCA()
	if err != nil {
		return "", "", err
	}
	return a.issue(filepath.Join(c.Dir, "pki", name), s)
}

func (c *Cluster) loadedCA() (*ca, error) {
	if c.ca == nil {
		a, err := loadCA(filepath.Join(c.Dir, "pki"))
		if err != nil {
			return nil, err
		}
		c.ca = a
	}
	return c.ca, nil
}

var nodeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// ValidNodeName accepts a Kubernetes node name (a DNS-1123 subdomain, up to 63 characters
// here) that is also a safe file name.
func ValidNodeName(name string) error {
	if !nodeName.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("harness: bad node name %q", name)
	}
	return nil
}

// Kubectl returns kubectl as the admin, its cache kept under Dir.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	cache := filepath.Join(c.Dir, "kubectl-cache")
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"),
		append([]string{"--kubeconfig=" + c.AdminKubeconfig, "--cache-dir=" + cache}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+cache, "HOME="+c.Dir)
	return cmd
}

// Load returns the cluster that Up (with Detach) left running in dir.
func Load(dir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return nil, fmt.Errorf("harness: no cluster in %s: %w", dir, err)
	}
	c := &Cluster{exited: map[string]chan struct{}{}}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("harness: %s/cluster.json: %w", dir, err)
	}
	return c, nil
}

// running tells whether any process of a loaded cluster still runs its binary.
func (c *Cluster) running() bool {
	for _, p := range c.Procs {
		if pidRuns(p) {
			return true
		}
	}
	return false
}

// pidRuns tells whether p.Pid still runs p.Path (and not a process that reused the pid).
func pidRuns(p Proc) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(p.Pid) + "/exe")
	return err == nil && strings.TrimSuffix(exe, " (deleted)") == p.Path
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "cluster.json"), b, 0o600)
}

// Down ends every process of the cluster, the last started first: SIGTERM, then SIGKILL
// after 10 s. Files stay in Dir (the caller's to remove). It may be called more than once.
func (c *Cluster) Down() error {
	c.mu.Lock()
	procs := c.Procs
	c.Procs = nil
	c.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := c.stop(procs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "cluster.json")); err == nil {
		errs = append(errs, c.save())
	}
	return errors.Join(errs...)
}

func (c *Cluster) start(o Options, name string, args ...string) error {
	path := filepath.Join(c.BinDir, name)
	logPath := filepath.Join(c.Dir, "logs", name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	cmd := exec.Command(path, append(args, o.ExtraArgs[name]...)...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = lf, lf
	// A group of its own, so that Down's signals reach nothing else and a terminal's do not
	// reach it; killed with the caller unless detached.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !o.Detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	start := cmd.Start
	if !o.Detach {
		start = func() error { return startPinned(cmd) }
	}
	if err := start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.Procs = append(c.Procs, Proc{Name: name, Pid: cmd.Process.Pid, Path: path, Log: logPath})
	c.exited[name] = done
	c.mu.Unlock()
	return nil
}

// The kernel sends Pdeathsig when the thread that forked the child exits, not the process,
// and Go ends an OS thread when a goroutine locked to it returns (as network-namespace code
// does). So children with Pdeathsig are started from one goroutine locked to its thread for
// the life of the process: that thread never exits before the process does.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func startPinned(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.err
}

func (c *Cluster) stop(p Proc) error {
	done := c.exited[p.Name]
	if done == nil { // started by another process (Load): only if the pid still runs it
		if !pidRuns(p) {
			return nil
		}
		d := make(chan struct{})
		go func() {
			for {
				if _, err := os.Stat("/proc/" + strconv.Itoa(p.Pid)); err != nil {
					close(d)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		done = d
	}
	_ = syscall.Kill(-p.Pid, syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("harness: %s (pid %d) did not end", p.Name, p.Pid)
	}
}

// waitFor polls check until it succeeds, a component exits, or the timeout.
func (c *Cluster) waitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		c.mu.Lock()
		for name, done := range c.exited {
			select {
			case <-done:
				c.mu.Unlock()
				return fmt.Errorf("%s exited while waiting for %s", name, what)
			default:
			}
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	c.mu.Lock()
	procs := append([]Proc(nil), c.Procs...)
	c.mu.Unlock()
	for _, p := range procs {
		data, err := os.ReadFile(p.Log)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "\n--- %s (%s):\n%s", p.Name, p.Log, strings.Join(lines, "\n"))
	}
	return b.String()
}

// adminClient is an HTTP client that verifies the CA and presents the admin certificate.
func (c *Cluster) adminClient() (*http.Client, error) {
	caPEM, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("bad CA file")
	}
	pki := filepath.Join(c.Dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

func get(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return do(hc, req, http.StatusOK)
}

// post creates an object; one that exists already is fine.
func post(ctx context.Context, hc *http.Client, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(hc, req, http.StatusCreated, http.StatusConflict)
}

func do(hc *http.Client, req *http.Request, ok ...int) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	for _, s := range ok {
		if resp.StatusCode == s {
			return nil
		}
	}
	return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
}

// freePorts reserves loopback ports by listening on port 0, then frees them for the
// components to bind (another process could take one in between; Up then fails loudly).
func freePorts() (ports, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var n [5]int
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ports{}, err
		}
		ls = append(ls, l)
		n[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports{etcd: n[0], etcdPeer: n[1], apiserver: n[2], kcm: n[3], scheduler: n[4]}, nil
}
