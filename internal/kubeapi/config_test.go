package kubeapi

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// kc builds a kubeconfig whose current context "c" uses cluster "cl" and user "u", with
// the given YAML lines (newline-separated) as the cluster's and the user's fields, and
// namespace ns if not "".
func kc(cluster, user, ns string) string {
	s := "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: cl\n  cluster:\n"
	for _, l := range strings.Split(cluster, "\n") {
		s += "    " + l + "\n"
	}
	s += "users:\n- name: u\n  user:\n"
	for _, l := range strings.Split(user, "\n") {
		s += "    " + l + "\n"
	}
	s += "contexts:\n- name: c\n  context:\n    cluster: cl\n    user: u\n"
	if ns != "" {
		s += "    namespace: " + ns + "\n"
	}
	return s
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestParseKubeconfig(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"ca.pem": "CA", "sub/cert.pem": "CERT", "key.pem": "KEY", "empty": ""} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const srv = "server: https://10.0.0.1:6443"
	tests := []struct {
		name string
		in   string
		want Config
		err  string // substring of the error; "" = no error
	}{
		{
			name: "files relative to baseDir, token, namespace",
			in:   kc(srv+"\ncertificate-authority: ca.pem", "token: tok", "team-a"),
			want: Config{Server: "https://10.0.0.1:6443", CAData: []byte("CA"), Token: "tok", Namespace: "team-a"},
		},
		{
			name: "absolute file paths, client certificate",
			in: kc(srv+"\ncertificate-authority: "+filepath.Join(dir, "ca.pem"),
				"client-certificate: "+filepath.Join(dir, "sub/cert.pem")+"\nclient-key: key.pem", ""),
			want: Config{Server: "https://10.0.0.1:6443", CAData: []byte("CA"), CertData: []byte("CERT"), KeyData: []byte("KEY")},
		},
		{
			name: "data fields",
			in: kc(srv+"\ncertificate-authority-data: "+b64("CA"),
				"client-certificate-data: "+b64("CERT")+"\nclient-key-data: "+b64("KEY"), ""),
			want: Config{Server: "https://10.0.0.1:6443", CAData: []byte("CA"), CertData: []byte("CERT"), KeyData: []byte("KEY")},
		},
		{
			name: "tokenFile relative to baseDir, not read; no CA = system roots; path prefix kept, slash dropped",
			in:   kc("server: https://k8s.example.com/k8s/clusters/c1/", "tokenFile: sub/token", ""),
			want: Config{Server: "https://k8s.example.com/k8s/clusters/c1", TokenFile: filepath.Join(dir, "sub/token")},
		},
		{
			name: "JSON",
			in: `{"kind":"Config","current-context":"c",
				"clusters":[{"name":"cl","cluster":{"server":"https://[::1]:6443","certificate-authority-data":"` + b64("CA") + `"}}],
				"users":[{"name":"u","user":{"token":"tok","exec":null}}],
				"contexts":[{"name":"c","context":{"cluster":"cl","user":"u","namespace":"ns1"}}]}`,
			want: Config{Server: "https://[::1]:6443", CAData: []byte("CA"), Token: "tok", Namespace: "ns1"},
		},
		{
			name: "current context chosen among several",
			in: `current-context: two
clusters: [{name: a, cluster: {server: "https://a"}}, {name: b, cluster: {server: "https://b"}}]
users: [{name: a, user: {token: ta}}, {name: b, user: {token: tb}}]
contexts: [{name: one, context: {cluster: a, user: a}}, {name: two, context: {cluster: b, user: b, namespace: nb}}]`,
			want: Config{Server: "https://b", Token: "tb", Namespace: "nb"},
		},
		{name: "no current-context", in: strings.Replace(kc(srv, "token: t", ""), "current-context: c", "", 1), err: "current-context is not set"},
		{name: "unknown current-context", in: strings.Replace(kc(srv, "token: t", ""), "current-context: c", "current-context: x", 1), err: `current-context "x" names no context`},
		{name: "unknown cluster", in: strings.Replace(kc(srv, "token: t", ""), "cluster: cl", "cluster: nope", 1), err: `cluster "nope" is not in clusters`},
		{name: "unknown user", in: strings.Replace(kc(srv, "token: t", ""), "user: u", "user: nope", 1), err: `user "nope" is not in users`},
		{name: "http server", in: kc("server: http://10.0.0.1:8080", "token: t", ""), err: "not an https URL"},
		{name: "no server", in: kc("certificate-authority: ca.pem", "token: t", ""), err: "not an https URL"},
		{name: "server without host", in: kc("server: https:///api", "token: t", ""), err: "names no host"},
		{name: "server with userinfo", in: kc("server: https://a:b@host", "token: t", ""), err: "only scheme, host, port and path"},
		{name: "server with bad port", in: kc("server: https://host:x", "token: t", ""), err: "not a URL"},
		{name: "insecure-skip-tls-verify", in: kc(srv+"\ninsecure-skip-tls-verify: true", "token: t", ""), err: "insecure-skip-tls-verify is refused"},
		{name: "tls-server-name", in: kc(srv+"\ntls-server-name: x", "token: t", ""), err: "tls-server-name is not supported"},
		{name: "proxy-url", in: kc(srv+"\nproxy-url: http://proxy", "token: t", ""), err: "proxy-url is not supported"},
		{name: "exec plugin", in: kc(srv, "exec:\n  command: aws\n  apiVersion: client.authentication.k8s.io/v1", ""), err: "exec and auth-provider plugins are not supported: use a client certificate or a token"},
		{name: "auth-provider plugin", in: kc(srv, "auth-provider:\n  name: gcp", ""), err: "exec and auth-provider plugins are not supported"},
		{name: "basic auth", in: kc(srv, "username: a\npassword: b", ""), err: "basic auth) is not supported"},
		{name: "impersonation", in: kc(srv, "token: t\nas: admin", ""), err: "impersonation"},
		{name: "impersonated extra", in: kc(srv, "token: t\nas-user-extra: {scopes: [x]}", ""), err: "impersonation"},
		{name: "impersonated groups", in: kc(srv, "token: t\nas-groups: [system:masters]", ""), err: "impersonation"},
		{name: "token and tokenFile", in: kc(srv, "token: t\ntokenFile: f", ""), err: "both token and tokenFile"},
		{name: "CA as file and data", in: kc(srv+"\ncertificate-authority: ca.pem\ncertificate-authority-data: "+b64("CA"), "token: t", ""), err: "both certificate-authority and certificate-authority-data"},
		{name: "bad base64", in: kc(srv+"\ncertificate-authority-data: '%%%'", "token: t", ""), err: "certificate-authority-data: not base64"},
		{name: "bad base64 key", in: kc(srv, "client-certificate-data: "+b64("C")+"\nclient-key-data: 'a b!'", ""), err: "client-key-data: not base64"},
		{name: "missing CA file", in: kc(srv+"\ncertificate-authority: nope.pem", "token: t", ""), err: "certificate-authority: open "},
		{name: "empty CA file", in: kc(srv+"\ncertificate-authority: empty", "token: t", ""), err: "certificate-authority: the file is empty"},
		{name: "certificate without key", in: kc(srv, "client-certificate: sub/cert.pem", ""), err: "client-certificate and client-key go together"},
		{name: "not YAML", in: "clusters: [", err: "not a kubeconfig"},
		{name: "not JSON", in: `{"clusters": 1}`, err: "not a kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKubeconfig([]byte(tt.in), dir)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want one containing %q of class ErrInvalidArgument", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config")
	if err := os.WriteFile(p, []byte(kc("server: https://h\ncertificate-authority: ca.pem", "token: t", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadKubeconfig(p)
	if err != nil || string(cfg.CAData) != "CA" {
		t.Fatalf("LoadKubeconfig = %+v, %v; want the CA read beside the file", cfg, err)
	}
	if _, err := LoadKubeconfig(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestInCluster(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
	getenv := func(k string) string { return env[k] }

	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InCluster(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("InCluster outside a Pod: err = %v, want ErrUnavailable", err)
	}
	if _, err := inCluster(dir, func(string) string { return "" }); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("outside a Pod: err = %v, want ErrUnavailable", err)
	}
	if _, err := inCluster(dir, getenv); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("no ca.crt: err = %v", err)
	}
	write("ca.crt", "CA")
	if _, err := inCluster(dir, getenv); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("no token: err = %v", err)
	}
	write("token", "tok")
	cfg, err := inCluster(dir, getenv)
	want := Config{Server: "https://[fd00::1]:443", CAData: []byte("CA"), TokenFile: filepath.Join(dir, "token")}
	if err != nil || !reflect.DeepEqual(cfg, want) {
		t.Errorf("without namespace: %+v, %v; want %+v", cfg, err, want)
	}
	write("namespace", "team-b\n")
	want.Namespace = "team-b"
	if cfg, err := inCluster(dir, getenv); err != nil || !reflect.DeepEqual(cfg, want) {
		t.Errorf("with namespace: %+v, %v; want %+v", cfg, err, want)
	}
}

// FuzzParseKubeconfig: a kubeconfig is user input. Parsing never panics, and a Config it
// returns always names an https server.
func FuzzParseKubeconfig(f *testing.F) {
	f.Add([]byte(kc("server: https://10.0.0.1:6443\ncertificate-authority: ca.pem", "token: tok", "ns")))
	f.Add([]byte(kc("server: https://h\ncertificate-authority-data: "+b64("CA"), "client-certificate-data: "+b64("C")+"\nclient-key: k", "")))
	f.Add([]byte(`{"current-context":"c","clusters":[{"name":"c","cluster":{"server":"https://h"}}],"users":[{"name":"u","user":{"tokenFile":"t"}}],"contexts":[{"name":"c","context":{"cluster":"c","user":"u"}}]}`))
	readFile := func(p string) ([]byte, error) {
		if strings.HasSuffix(p, "missing") {
			return nil, os.ErrNotExist
		}
		return []byte(p), nil
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := parseKubeconfig(b, "/base", readFile)
		if err != nil {
			return
		}
		if s, err := checkServer(cfg.Server); err != nil || s != cfg.Server || !strings.HasPrefix(cfg.Server, "https://") {
			t.Fatalf("returned Server %q is not a checked https URL (%v)", cfg.Server, err)
		}
		if (cfg.CertData == nil) != (cfg.KeyData == nil) {
			t.Fatalf("a certificate without key or a key without certificate")
		}
	})
}
