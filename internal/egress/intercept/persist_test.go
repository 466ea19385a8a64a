package intercept

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestCAPersists(t *testing.T) {
	ca, err := NewCA("sb-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	data, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadCA(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.CertPEM(), ca.CertPEM()) {
		t.Error("certificate changed")
	}
	leaf, err := back.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.Leaf.CheckSignatureFrom(ca.Certificate()); err != nil {
		t.Errorf("a leaf of the reloaded CA does not chain to the original: %v", err)
	}
	if strings.Contains(string(ca.CertPEM()), "PRIVATE KEY") {
		t.Error("CertPEM holds the key")
	}
	other, _ := NewCA("sb-2", time.Hour)
	otherPEM, _ := other.MarshalPEM()
	mixed := append(ca.CertPEM(), otherPEM[len(other.CertPEM()):]...)
	if _, err := LoadCA(mixed); err == nil {
		t.Error("a key of another CA was accepted")
	}
	if _, err := LoadCA(ca.CertPEM()); err == nil {
		t.Error("a certificate without key was accepted")
	}
}
