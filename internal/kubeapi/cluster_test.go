package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// TestCluster runs the client against a real kube-apiserver: the one whose admin kubeconfig
// MOAT_KUBECONFIG names (`make test-cluster` brings the test control plane up and sets it;
// by hand: scripts/test-cluster.sh up /tmp/kc; MOAT_KUBECONFIG=/tmp/kc/admin.kubeconfig
// go test -run TestCluster ./internal/kubeapi/; scripts/test-cluster.sh down /tmp/kc).
// Skipped without it. It needs no node: its Pods stay Pending, unscheduled.
func TestCluster(t *testing.T) {
	path := os.Getenv("MOAT_KUBECONFIG")
	if path == "" {
		t.Skip("MOAT_KUBECONFIG is not set (make test-cluster sets it)")
	}
	cfg, err := LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.watchTimeout = time.Second // the server ends each watch after a second: WatchPod must resume
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const ns = "default"
	run := make([]byte, 4)
	_, _ = rand.Read(run)
	id := hex.EncodeToString(run)
	name := "kubeapi-test-" + id
	sel := "moat.dev/kubeapi-test=" + id
	pod := &Pod{
		Metadata: ObjectMeta{Name: name, Labels: map[string]string{"moat.dev/kubeapi-test": id}},
		Spec: PodSpec{
			AutomountServiceAccountToken: new(bool),
			Tolerations:                  []Toleration{{Key: "moat.dev/test", Operator: "Exists", Effect: "NoSchedule"}},
			Containers:                   []Container{{Name: "c", Image: "registry.invalid/none:1", Env: []EnvVar{{Name: "A", Value: "1"}}}},
		},
	}
	zero := int64(0)
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), ns, name, &zero) })

	created, err := c.CreatePod(ctx, ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	if created.Metadata.UID == "" || created.Metadata.Namespace != ns || created.Status.Phase != "Pending" {
		t.Errorf("created: %+v", created.Metadata)
	}
	if _, err := c.CreatePod(ctx, ns, pod); !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), "POST /api/v1/namespaces/default/pods") {
		t.Errorf("the same name again: %v, want ErrAlreadyExists naming the request", err)
	}
	got, err := c.GetPod(ctx, ns, name)
	if err != nil || got.Metadata.UID != created.Metadata.UID || got.Spec.Containers[0].Env[0] != (EnvVar{Name: "A", Value: "1"}) {
		t.Fatalf("GetPod: %+v, %v", got, err)
	}
	for _, listNS := range []string{ns, ""} {
		pods, err := c.ListPods(ctx, listNS, sel)
		if err != nil || len(pods) != 1 || pods[0].Metadata.UID != created.Metadata.UID {
			t.Errorf("ListPods(%q, %q): %d Pods, %v", listNS, sel, len(pods), err)
		}
	}
	if pods, err := c.ListPods(ctx, ns, sel+",other=x"); err != nil || len(pods) != 0 {
		t.Errorf("a selector that matches nothing: %d Pods, %v", len(pods), err)
	}

	// WatchPod sees the patches made from here (one of them after the server has ended a
	// watch), then the delete.
	seen := make(chan string, 16)
	watched := make(chan error, 1)
	go func() {
		watched <- c.WatchPod(ctx, ns, name, func(p *Pod) (bool, error) {
			seen <- p.Metadata.Labels["step"]
			return false, nil
		})
	}()
	waitFor := func(step string) {
		t.Helper()
		for {
			select {
			case s := <-seen:
				if s == step {
					return
				}
			case err := <-watched:
				t.Fatalf("WatchPod ended waiting for step %q: %v", step, err)
			case <-ctx.Done():
				t.Fatalf("WatchPod never saw step %q", step)
			}
		}
	}
	waitFor("")
	patched, err := c.PatchPodMetadata(ctx, ns, name, map[string]string{"step": "one"}, map[string]string{"moat.dev/note": "n"})
	if err != nil || patched.Metadata.Labels["step"] != "one" || patched.Metadata.Labels["moat.dev/kubeapi-test"] != id {
		t.Fatalf("PatchPodMetadata: %v, %v (want the new label beside the old)", patched.Metadata.Labels, err)
	}
	if got, err := c.GetPod(ctx, ns, name); err != nil || got.Metadata.Annotations["moat.dev/note"] != "n" || got.Metadata.Labels["step"] != "one" {
		t.Errorf("read back after the patch: %+v, %v", got.Metadata, err)
	}
	waitFor("one")
	time.Sleep(2500 * time.Millisecond) // past two of the server's one-second watches
	if _, err := c.PatchPodMetadata(ctx, ns, name, map[string]string{"step": "two"}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor("two")

	if err := c.DeletePod(ctx, ns, name, &zero); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-watched:
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("WatchPod after the delete: %v, want ErrNotFound", err)
		}
	case <-ctx.Done():
		t.Fatal("WatchPod did not see the delete")
	}
	if _, err := c.GetPod(ctx, ns, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetPod after the delete: %v, want ErrNotFound", err)
	}
	if err := c.DeletePod(ctx, ns, name, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeletePod again: %v, want ErrNotFound", err)
	}

	if _, err := c.ListNodes(ctx, ""); err != nil {
		t.Errorf("ListNodes: %v", err)
	}
	if _, err := c.GetNode(ctx, "no-such-node-"+id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetNode of a missing node: %v", err)
	}

	t.Run("wrong CA", func(t *testing.T) {
		bad := cfg
		bad.CAData = otherCA(t)
		c, err := New(bad)
		if err != nil {
			t.Fatal(err)
		}
		var unknown x509.UnknownAuthorityError
		if _, err := c.ListNodes(ctx, ""); !errors.As(err, &unknown) || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("ListNodes with a CA that did not sign the server's certificate: %v", err)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		c, err := New(Config{Server: cfg.Server, CAData: cfg.CAData, Token: "not-a-token"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ListPods(ctx, ns, ""); !errors.Is(err, errdefs.ErrUnauthenticated) || strings.Contains(err.Error(), "not-a-token") {
			t.Errorf("ListPods with an unknown token: %v, want ErrUnauthenticated without the token", err)
		}
	})
	t.Run("no rights", func(t *testing.T) {
		// The default service account's token, from a TokenRequest, used as a token file.
		var tr struct {
			Status struct {
				Token string `json:"token"`
			} `json:"status"`
		}
		req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 600}}
		if err := c.call(ctx, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/default/token", nil, "application/json", req, &tr, maxObject); err != nil || tr.Status.Token == "" {
			t.Fatalf("TokenRequest: %v", err)
		}
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte(tr.Status.Token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		sa, err := New(Config{Server: cfg.Server, CAData: cfg.CAData, TokenFile: file})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sa.ListPods(ctx, "", "")
		if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "system:serviceaccount:default:default") || strings.Contains(err.Error(), tr.Status.Token) {
			t.Errorf("ListPods as the default service account: %v, want ErrPermissionDenied naming it, without its token", err)
		}
	})
}

// otherCA is the PEM certificate of a new CA, which signed nothing.
func otherCA(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "not the cluster's CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
