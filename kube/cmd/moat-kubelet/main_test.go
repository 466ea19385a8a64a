package main

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

// TestClientAllowed: the kubelet API admits only a verified client certificate whose
// common name is allowed (the API server's kubelet client), not an unverified one, not
// another name (a node's own certificate is signed by the same CA).
func TestClientAllowed(t *testing.T) {
	leaf := func(cn string) *tls.ConnectionState {
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}}
	}
	allowed := []string{"kube-apiserver-kubelet-client"}
	for _, tt := range []struct {
		name string
		cs   *tls.ConnectionState
		want bool
	}{
		{"no TLS", nil, false},
		{"no verified chain", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "kube-apiserver-kubelet-client"}}}}, false},
		{"apiserver", leaf("kube-apiserver-kubelet-client"), true},
		{"a node", leaf("system:node:moat-b"), false},
		{"empty name", leaf(""), false},
	} {
		if got := clientAllowed(tt.cs, allowed); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
