package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultCAValidity is how long a CA lives when NewCA is given no validity.
	DefaultCAValidity = 24 * time.Hour
	// leafValidity bounds a leaf's lifetime; a leaf never outlives its CA.
	leafValidity = time.Hour
	// leafRenew is how long before its expiry a cached leaf is replaced.
	leafRenew = 15 * time.Minute
	// clockSkew backdates NotBefore so that a sandbox whose clock is slightly behind
	// accepts a fresh certificate.
	clockSkew = time.Minute
	// maxLeaves bounds the cache; expired entries are dropped first.
	maxLeaves = 256
)

// CA is one sandbox's certificate authority: ECDSA P-256, valid for 24 h unless NewCA is
// told otherwise. Its private key never leaves the daemon: nothing here returns or prints
// it. Leaf certificates (ECDSA P-256, valid for at most an hour and never past the CA, the
// host as their only SAN) are minted per host on demand and cached until shortly before
// they expire. Safe for concurrent use.
type CA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
	now  func() time.Time // for tests

	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
	configs map[string]*tls.Config
}

// NewCA makes a CA named for its sandbox (name appears in the subject, for whoever reads
// the sandbox's trust store). validity ≤ 0 means DefaultCAValidity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	now := time.Now()
	cn := "moat sandbox CA"
	if name != "" {
		cn = "moat sandbox " + name + " CA"
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"moat"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves, never another CA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	return &CA{cert: cert, der: der, key: key, now: time.Now, leaves: map[string]*tls.Certificate{}, configs: map[string]*tls.Config{}}, nil
}

// CertPEM is the CA certificate (never its key), PEM-encoded: what goes into the
// sandbox's trust store.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// Certificate is the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns a certificate for host (a DNS name or an IP address) signed by the CA,
// from the cache while it has more than a few minutes left. It fails for an empty or
// malformed host and once the CA has expired.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	host = normalizeHost(host)
	if err := checkLeafHost(host); err != nil {
		return nil, err
	}
	now := ca.now()
	ca.mu.Lock()
	c, ok := ca.leaves[host]
	ca.mu.Unlock()
	if ok && now.Before(c.Leaf.NotAfter.Add(-leafRenew)) {
		return c, nil
	}
	c, err := ca.mint(host, now)
	if err != nil {
		return nil, err
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if len(ca.leaves) >= maxLeaves {
		for h, old := range ca.leaves {
			if !now.Before(old.Leaf.NotAfter.Add(-leafRenew)) {
				delete(ca.leaves, h)
			}
		}
		if len(ca.leaves) >= maxLeaves {
			clear(ca.leaves)
		}
	}
	ca.leaves[host] = c
	return c, nil
}

func (ca *CA) mint(host string, now time.Time) (*tls.Certificate, error) {
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	if !now.Before(notAfter) {
		return nil, fmt.Errorf("minting a certificate for %s: the sandbox CA expired at %s", host, ca.cert.NotAfter.Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key for %s: %w", host, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate for %s: %w", host, err)
	}
	// The chain is the leaf alone: the sandbox trusts the CA itself.
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n.Add(n, big.NewInt(1))
}

// normalizeHost lower-cases host and drops a trailing dot.
func normalizeHost(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// checkLeafHost accepts an IP address or a DNS name of letters, digits, '-', '_' and dots.
func checkLeafHost(host string) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if host == "" || len(host) > 253 {
		return errors.New("a certificate needs a host name of 1 to 253 characters")
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("%q is not a host name", host)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return fmt.Errorf("%q is not a host name", host)
			}
		}
	}
	return nil
}

// serverConfig is the TLS configuration that presents host's leaf to the sandbox: one per
// host and CA, so that the sandbox's clients can resume sessions (its ticket keys die with
// the CA). ALPN offers http/1.1 only.
func (ca *CA) serverConfig(host string) (*tls.Config, error) {
	host = normalizeHost(host)
	if _, err := ca.Leaf(host); err != nil {
		return nil, err
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.configs[host]; ok {
		return c, nil
	}
	if len(ca.configs) >= maxLeaves {
		clear(ca.configs)
	}
	c := &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(host) },
		NextProtos:     []string{"http/1.1"},
		MinVersion:     tls.VersionTLS12,
		// The sandbox's side of the connection never leaves the machine (a veth to the
		// gateway namespace): classical key exchange is enough there, and skipping the
		// post-quantum hybrid saves its cost on every intercepted connection. The
		// upstream side keeps Go's defaults, hybrid included.
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256},
	}
	ca.configs[host] = c
	return c, nil
}
