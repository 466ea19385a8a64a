package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity covers any test run; the CA is made anew for every cluster.
const certValidity = 48 * time.Hour

// CertSpec is what IssueCert puts in a certificate. Kubernetes reads a client certificate's
// Common Name as the user and its Organizations as the groups.
type CertSpec struct {
	CommonName    string
	Organizations []string
	Client        bool // extended key usage clientAuth
	Server        bool // extended key usage serverAuth
	IPs           []net.IP
	DNSNames      []string
}

// ca is a certificate authority whose key signs every certificate of one cluster.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(dir string) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "moat-test-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &ca{cert: cert, key: key}
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if err := writeKey(filepath.Join(dir, "ca.key"), key); err != nil {
		return nil, err
	}
	return c, nil
}

func loadCA(dir string) (*ca, error) {
	cb, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, errors.New("ca: no PEM block")
	}
	cert, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kp.Bytes)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key}, nil
}

// issue writes base.crt and base.key (mode 0600) signed by the CA.
func (c *ca) issue(base string, s CertSpec) (certFile, keyFile string, err error) {
	if s.CommonName == "" || (!s.Client && !s.Server) {
		return "", "", errors.New("certificate needs a common name and a usage")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.CommonName, Organization: s.Organizations},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		IPAddresses:  s.IPs,
		DNSNames:     s.DNSNames,
	}
	if s.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return "", "", fmt.Errorf("certificate %s: %w", s.CommonName, err)
	}
	certFile, keyFile = base+".crt", base+".key"
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	if err := writeKey(keyFile, key); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// writeKeyPair writes an unsigned key pair (the service-account token signing key).
func writeKeyPair(base string) (pubFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	pubFile, keyFile = base+".pub", base+".key"
	if err := writePEM(pubFile, "PUBLIC KEY", pub); err != nil {
		return "", "", err
	}
	if err := writeKey(keyFile, key); err != nil {
		return "", "", err
	}
	return pubFile, keyFile, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}
