package kubeapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/moatdev/moat/internal/errdefs"
)

// Config is how to reach an API server: over TLS, with the server's CA and a client
// certificate or a bearer token. It holds secrets (KeyData, Token): never log it.
type Config struct {
	Server    string // https://host:port, optionally with a path prefix; http is refused
	CAData    []byte // PEM bundle of the CAs the server's certificate must chain to; empty = system roots
	CertData  []byte // client certificate (PEM), optional; needs KeyData
	KeyData   []byte // its private key (PEM)
	Token     string // bearer token, optional
	TokenFile string // bearer token read from this file, re-read as it rotates; optional
	Namespace string // the context's namespace (kubeconfig) or the service account's (in-cluster); "" if none
}

// maxFile caps every file a kubeconfig names (and the kubeconfig itself).
const maxFile = 1 << 20

// serviceAccountDir is where a Pod finds its service account's token, CA and namespace.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// kubeconfig is the part of a kubeconfig file (clientcmd v1.Config) moat reads. Fields
// moat refuses are decoded too, so that they are refused rather than silently ignored.
type kubeconfig struct {
	CurrentContext string      `yaml:"current-context" json:"current-context"`
	Clusters       []kcCluster `yaml:"clusters" json:"clusters"`
	Users          []kcUser    `yaml:"users" json:"users"`
	Contexts       []kcContext `yaml:"contexts" json:"contexts"`
}

type kcCluster struct {
	Name    string `yaml:"name" json:"name"`
	Cluster struct {
		Server                   string `yaml:"server" json:"server"`
		CertificateAuthority     string `yaml:"certificate-authority" json:"certificate-authority"`
		CertificateAuthorityData string `yaml:"certificate-authority-data" json:"certificate-authority-data"`
		InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify" json:"insecure-skip-tls-verify"`
		TLSServerName            string `yaml:"tls-server-name" json:"tls-server-name"`
		ProxyURL                 string `yaml:"proxy-url" json:"proxy-url"`
	} `yaml:"cluster" json:"cluster"`
}

type kcUser struct {
	Name string `yaml:"name" json:"name"`
	User struct {
		ClientCertificate     string `yaml:"client-certificate" json:"client-certificate"`
		ClientCertificateData string `yaml:"client-certificate-data" json:"client-certificate-data"`
		ClientKey             string `yaml:"client-key" json:"client-key"`
		ClientKeyData         string `yaml:"client-key-data" json:"client-key-data"`
		Token                 string `yaml:"token" json:"token"`
		TokenFile             string `yaml:"tokenFile" json:"tokenFile"`
		Username              string `yaml:"username" json:"username"`
		Password              string `yaml:"password" json:"password"`
		Impersonate           string `yaml:"as" json:"as"`
		ImpersonateUID        string `yaml:"as-uid" json:"as-uid"`
		ImpersonateGroups     []any  `yaml:"as-groups" json:"as-groups"`
		ImpersonateExtra      any    `yaml:"as-user-extra" json:"as-user-extra"`
		Exec                  any    `yaml:"exec" json:"exec"`
		AuthProvider          any    `yaml:"auth-provider" json:"auth-provider"`
	} `yaml:"user" json:"user"`
}

type kcContext struct {
	Name    string `yaml:"name" json:"name"`
	Context struct {
		Cluster   string `yaml:"cluster" json:"cluster"`
		User      string `yaml:"user" json:"user"`
		Namespace string `yaml:"namespace" json:"namespace"`
	} `yaml:"context" json:"context"`
}

// LoadKubeconfig reads the kubeconfig file at path and resolves it with ParseKubeconfig,
// relative to the file's directory.
func LoadKubeconfig(path string) (Config, error) {
	b, err := readCapped(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading kubeconfig: %w", err)
	}
	cfg, err := ParseKubeconfig(b, filepath.Dir(path))
	if err != nil {
		return Config{}, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// ParseKubeconfig resolves the current context of a kubeconfig (YAML, or JSON) to a Config:
// the context's cluster and user, and its namespace. certificate-authority,
// client-certificate, client-key and tokenFile name files relative to baseDir (the first
// three are read now; the token file is read by the Client, as it rotates); the *-data
// fields are base64. It refuses, with an error of class errdefs.ErrInvalidArgument naming
// the field: no or an unknown current context, cluster or user; an http (or otherwise
// non-https) server; insecure-skip-tls-verify; exec and auth-provider plugins, basic auth,
// impersonation, tls-server-name and proxy-url (not supported); a field given both as a
// file and as data; bad base64. A Config it returns always has an https Server.
func ParseKubeconfig(b []byte, baseDir string) (Config, error) {
	return parseKubeconfig(b, baseDir, readCapped)
}

// parseKubeconfig is ParseKubeconfig reading files with readFile (the fuzz test reads none).
func parseKubeconfig(b []byte, baseDir string, readFile func(string) ([]byte, error)) (Config, error) {
	resolve := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(baseDir, p)
	}
	var kc kubeconfig
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		if err := json.Unmarshal(t, &kc); err != nil {
			return Config{}, invalid("not a kubeconfig: %v", err)
		}
	} else if err := yaml.Unmarshal(b, &kc); err != nil {
		return Config{}, invalid("not a kubeconfig: %v", err)
	}
	if kc.CurrentContext == "" {
		return Config{}, invalid("current-context is not set")
	}
	ctxIdx := slices.IndexFunc(kc.Contexts, func(x kcContext) bool { return x.Name == kc.CurrentContext })
	if ctxIdx < 0 {
		return Config{}, invalid("current-context %q names no context", kc.CurrentContext)
	}
	kctx := kc.Contexts[ctxIdx].Context
	cfg := Config{Namespace: kctx.Namespace}

	cl := slices.IndexFunc(kc.Clusters, func(x kcCluster) bool { return x.Name == kctx.Cluster })
	if cl < 0 {
		return Config{}, invalid("context %q: cluster %q is not in clusters", kc.CurrentContext, kctx.Cluster)
	}
	c := kc.Clusters[cl].Cluster
	server, err := checkServer(c.Server)
	if err != nil {
		return Config{}, fmt.Errorf("cluster %q: server: %w", kctx.Cluster, err)
	}
	cfg.Server = server
	switch {
	case c.InsecureSkipTLSVerify:
		return Config{}, invalid("cluster %q: insecure-skip-tls-verify is refused: give the server's CA in certificate-authority(-data)", kctx.Cluster)
	case c.TLSServerName != "":
		return Config{}, invalid("cluster %q: tls-server-name is not supported", kctx.Cluster)
	case c.ProxyURL != "":
		return Config{}, invalid("cluster %q: proxy-url is not supported", kctx.Cluster)
	}
	if cfg.CAData, err = fileOrData(readFile, resolve, c.CertificateAuthority, c.CertificateAuthorityData, "certificate-authority"); err != nil {
		return Config{}, fmt.Errorf("cluster %q: %w", kctx.Cluster, err)
	}

	us := slices.IndexFunc(kc.Users, func(x kcUser) bool { return x.Name == kctx.User })
	if us < 0 {
		return Config{}, invalid("context %q: user %q is not in users", kc.CurrentContext, kctx.User)
	}
	u := kc.Users[us].User
	switch {
	case u.Exec != nil, u.AuthProvider != nil:
		return Config{}, invalid("user %q: exec and auth-provider plugins are not supported: use a client certificate or a token", kctx.User)
	case u.Username != "", u.Password != "":
		return Config{}, invalid("user %q: username/password (basic auth) is not supported: use a client certificate or a token", kctx.User)
	case u.Impersonate != "", u.ImpersonateUID != "", len(u.ImpersonateGroups) > 0, u.ImpersonateExtra != nil:
		return Config{}, invalid("user %q: impersonation (as, as-uid, as-groups, as-user-extra) is not supported", kctx.User)
	case u.Token != "" && u.TokenFile != "":
		return Config{}, invalid("user %q: both token and tokenFile are set", kctx.User)
	}
	cfg.Token = u.Token
	if u.TokenFile != "" {
		cfg.TokenFile = resolve(u.TokenFile)
	}
	if cfg.CertData, err = fileOrData(readFile, resolve, u.ClientCertificate, u.ClientCertificateData, "client-certificate"); err != nil {
		return Config{}, fmt.Errorf("user %q: %w", kctx.User, err)
	}
	if cfg.KeyData, err = fileOrData(readFile, resolve, u.ClientKey, u.ClientKeyData, "client-key"); err != nil {
		return Config{}, fmt.Errorf("user %q: %w", kctx.User, err)
	}
	if (cfg.CertData == nil) != (cfg.KeyData == nil) {
		return Config{}, invalid("user %q: client-certificate and client-key go together", kctx.User)
	}
	return cfg, nil
}

// fileOrData returns the contents of a kubeconfig field given as a file (field) or as
// base64 (field-data); nil if neither is set.
func fileOrData(readFile func(string) ([]byte, error), resolve func(string) string, file, data, field string) ([]byte, error) {
	switch {
	case file != "" && data != "":
		return nil, invalid("both %s and %s-data are set", field, field)
	case data != "":
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, invalid("%s-data: not base64: %v", field, err)
		}
		if len(b) == 0 {
			return nil, invalid("%s-data is empty", field)
		}
		return b, nil
	case file != "":
		b, err := readFile(resolve(file))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if len(b) == 0 {
			return nil, invalid("%s: the file is empty", field)
		}
		return b, nil
	}
	return nil, nil
}

// checkServer accepts an https URL with a host and an optional path prefix, and returns it
// without a trailing slash.
func checkServer(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", invalid("not a URL: %v", err)
	}
	switch {
	case u.Scheme != "https":
		return "", invalid("%q is not an https URL (credentials must not travel in clear)", s)
	case u.Host == "" || u.Hostname() == "":
		return "", invalid("%q names no host", s)
	case u.User != nil, u.RawQuery != "", u.ForceQuery, u.Fragment != "", u.Opaque != "":
		return "", invalid("%q: only scheme, host, port and path are allowed", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// InCluster is the Config of the Pod this process runs in: the API server named by
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the service account's CA, token
// (as TokenFile: it rotates) and namespace. Outside a Pod it fails with
// errdefs.ErrUnavailable.
func InCluster() (Config, error) {
	return inCluster(serviceAccountDir, os.Getenv)
}

func inCluster(dir string, getenv func(string) string) (Config, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return Config{}, fmt.Errorf("not in a Kubernetes Pod: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is unset: %w", errdefs.ErrUnavailable)
	}
	server, err := checkServer("https://" + net.JoinHostPort(host, port))
	if err != nil {
		return Config{}, fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT: %w", err)
	}
	cfg := Config{Server: server, TokenFile: filepath.Join(dir, "token")}
	if cfg.CAData, err = readCapped(filepath.Join(dir, "ca.crt")); err != nil {
		return Config{}, fmt.Errorf("service account CA: %w", err)
	}
	if _, err := readCapped(cfg.TokenFile); err != nil {
		return Config{}, fmt.Errorf("service account token: %w", err)
	}
	ns, err := readCapped(filepath.Join(dir, "namespace"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Config{}, fmt.Errorf("service account namespace: %w", err)
	}
	cfg.Namespace = strings.TrimSpace(string(ns))
	return cfg, nil
}

// readCapped reads a file of at most maxFile bytes. Its errors are of class
// errdefs.ErrInvalidArgument (and wrap the os error: os.ErrNotExist for a missing file).
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w: %w", path, err, errdefs.ErrInvalidArgument)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: %w", path, maxFile, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}
