package harness

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pem.Decode(b)
	if p == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A node's certificate is what the Node authorizer and NodeRestriction read as node NAME
// (user system:node:NAME, group system:nodes), chains to the cluster CA for client and
// server use, serves 127.0.0.1, and its key is private to root.
func TestNodeCreds(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "pki"), 0o700)
	os.MkdirAll(filepath.Join(dir, "nodes"), 0o700)
	a, err := newCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Server: "https://127.0.0.1:6443", CAFile: filepath.Join(dir, "pki", "ca.crt")}
	n, err := c.Node("moat-a")
	if err != nil {
		t.Fatal(err)
	}
	cert := readCert(t, n.CertFile)
	if cert.Subject.CommonName != "system:node:moat-a" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Fatalf("subject %v", cert.Subject)
	}
	pool := x509.NewCertPool()
	pool.AddCert(a.cert)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Fatalf("usage %v: %v", u, err)
		}
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(n.KeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	kc, err := os.ReadFile(n.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`server: "https://127.0.0.1:6443"`, `client-certificate: "` + n.CertFile + `"`, `name: "system:node:moat-a"`} {
		if !strings.Contains(string(kc), want) {
			t.Fatalf("kubeconfig lacks %q:\n%s", want, kc)
		}
	}
	// Asked again, the same credentials.
	n2, err := c.Node("moat-a")
	if err != nil || n2 != n || !readCert(t, n2.CertFile).Equal(cert) {
		t.Fatalf("second Node: %v %v", n2, err)
	}
	// A client-only certificate is refused for serving.
	cf, _, err := c.IssueCert("client-only", CertSpec{CommonName: "x", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readCert(t, cf).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("client-only certificate verified for serving")
	}
	if _, _, err := c.IssueCert("nousage", CertSpec{CommonName: "x"}); err == nil {
		t.Fatal("certificate without usage issued")
	}
}

func TestValidNodeName(t *testing.T) {
	for name, ok := range map[string]bool{
		"moat-a": true, "node1.example": true, "a": true,
		"": false, "A": false, "-a": false, "a-": false, "../x": false, "a/b": false, "a..b": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false, "a b": false,
	} {
		if err := ValidNodeName(name); (err == nil) != ok {
			t.Errorf("ValidNodeName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestFreePortsDistinct(t *testing.T) {
	p, err := freePorts()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, n := range []int{p.etcd, p.etcdPeer, p.apiserver, p.kcm, p.scheduler} {
		if n == 0 || seen[n] {
			t.Fatalf("ports %+v", p)
		}
		seen[n] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", itoa(n)))
		if err != nil {
			t.Fatalf("port %d not freed: %v", n, err)
		}
		l.Close()
	}
}

func TestUpWithoutBinaries(t *testing.T) {
	_, err := Up(context.Background(), Options{Dir: t.TempDir(), BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "scripts/kube-tools.sh") {
		t.Fatalf("err = %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A child with Pdeathsig outlives the thread that asked for it: Go ends a thread whose locked
// goroutine returns (as network-namespace code does), and the kernel would then kill a child
// forked from that thread.
var errMainThread = errors.New("main thread")

func TestPinnedStartOutlivesThread(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := false
	for range 4 {
		errc := make(chan error, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if syscall.Gettid() == syscall.Getpid() {
				errc <- errMainThread // the main thread is wedged, not ended: try another
				return
			}
			errc <- startPinned(cmd)
		}()
		err := <-errc
		<-done
		if err == errMainThread {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		started = true
		break
	}
	if !started {
		t.Fatal("no goroutine ran off the main thread")
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("child gone: %v", err)
	}
	var ws syscall.WaitStatus
	if pid, _ := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid != 0 {
		t.Fatalf("child exited: %v", ws)
	}
}

// Up refuses a directory whose cluster still runs (it would overwrite its CA and certificates)
// and accepts one whose processes are gone.
func TestUpRefusesRunningDir(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	c := &Cluster{Dir: dir, Procs: []Proc{{Name: "etcd", Pid: cmd.Process.Pid, Path: cmd.Path}}}
	if err := c.save(); err != nil {
		t.Fatal(err)
	}
	_, err := Up(context.Background(), Options{Dir: dir, BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Fatalf("err = %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	_, err = Up(context.Background(), Options{Dir: dir, BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "scripts/kube-tools.sh") {
		t.Fatalf("after the process ended: err = %v", err)
	}
}
