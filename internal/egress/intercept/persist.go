package intercept

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// MarshalPEM encodes the CA certificate and its private key, for the daemon to keep the
// CA of a sandbox across restarts (in a root-only file: the sandbox's trust store holds
// the certificate, and the key must never reach it).
func (ca *CA) MarshalPEM() ([]byte, error) {
	key, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the CA key: %w", err)
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: key})...), nil
}

// LoadCA reads a CA written by MarshalPEM. It refuses a key that does not belong to the
// certificate, and a certificate that is not a CA.
func LoadCA(data []byte) (*CA, error) {
	var der, keyDER []byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			der = b.Bytes
		case "EC PRIVATE KEY":
			keyDER = b.Bytes
		}
	}
	if der == nil || keyDER == nil {
		return nil, errors.New("CA file lacks a certificate or its key")
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) || !cert.IsCA {
		return nil, errors.New("CA file: the key does not belong to the certificate, or it is no CA")
	}
	return &CA{cert: cert, der: der, key: key, now: time.Now, leaves: map[string]*tls.Certificate{}, configs: map[string]*tls.Config{}}, nil
}
