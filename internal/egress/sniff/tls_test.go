package sniff

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// captureHello returns the first flight crypto/tls sends as a client with cfg: one or more
// handshake records holding the ClientHello.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(c, cfg).Handshake() // fails once s closes
		c.Close()
	}()
	var out []byte
	for {
		var hdr [recordHeaderLen]byte
		if _, err := io.ReadFull(s, hdr[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
		if _, err := io.ReadFull(s, body); err != nil {
			t.Fatal(err)
		}
		out = append(append(out, hdr[:]...), body...)
		if _, err := ServerName(out); !errors.Is(err, ErrNeedMore) {
			break
		}
	}
	s.Close()
	<-done
	return out
}

// refragment re-splits the handshake bytes of a one-record flight into records of at most
// size bytes each.
func refragment(flight []byte, size int) []byte {
	msg := flight[recordHeaderLen:]
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, recordTypeHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// record wraps handshake bytes in one handshake record.
func record(hs []byte) []byte {
	return append([]byte{recordTypeHandshake, 3, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
}

// handshake wraps a ClientHello body in a handshake header.
func handshake(body []byte) []byte {
	n := len(body)
	return append([]byte{typeClientHello, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

func u16(n int) []byte { return []byte{byte(n >> 8), byte(n)} }

// helloBody builds a minimal ClientHello body with the given extension block (nil: none).
func helloBody(exts []byte) []byte {
	b := []byte{3, 3}
	b = append(b, make([]byte, 32)...) // random
	b = append(b, 0)                   // session id
	b = append(b, 0, 2, 0x13, 0x01)    // one cipher suite
	b = append(b, 1, 0)                // null compression
	if exts != nil {
		b = append(append(b, u16(len(exts))...), exts...)
	}
	return b
}

// ext encodes one extension.
func ext(typ int, data []byte) []byte {
	return append(append(u16(typ), u16(len(data))...), data...)
}

// sni encodes a server_name extension body listing the given (type, name) entries.
func sni(entries ...any) []byte {
	var list []byte
	for i := 0; i < len(entries); i += 2 {
		name := entries[i+1].(string)
		list = append(append(append(list, byte(entries[i].(int))), u16(len(name))...), name...)
	}
	return append(u16(len(list)), list...)
}

func helloWithSNI(name string) []byte {
	return record(handshake(helloBody(ext(extServerName, sni(0, name)))))
}

func TestServerNameCryptoTLS(t *testing.T) {
	for _, tc := range []struct {
		cfg  *tls.Config
		want string
	}{
		{&tls.Config{ServerName: "Example.COM"}, "example.com"},
		{&tls.Config{ServerName: "api.github.com", NextProtos: []string{"h2", "http/1.1"}}, "api.github.com"},
		{&tls.Config{ServerName: "a.example", MaxVersion: tls.VersionTLS12}, "a.example"},
		{&tls.Config{InsecureSkipVerify: true}, ""}, // no SNI
		{&tls.Config{ServerName: "192.0.2.1", InsecureSkipVerify: true}, ""},
	} {
		flight := captureHello(t, tc.cfg)
		got, err := ServerName(flight)
		if err != nil || got != tc.want {
			t.Errorf("%q: ServerName = %q, %v; want %q", tc.cfg.ServerName, got, err, tc.want)
		}
		r, err := Sniff(flight)
		if err != nil || r != (Result{TLS, tc.want}) {
			t.Errorf("%q: Sniff = %+v, %v", tc.cfg.ServerName, r, err)
		}
		// Every proper prefix needs more.
		for i := range len(flight) {
			if _, err := ServerName(flight[:i]); err != ErrNeedMore {
				t.Fatalf("%q: ServerName(first %d of %d bytes): %v", tc.cfg.ServerName, i, len(flight), err)
			}
			if _, err := Sniff(flight[:i]); err != ErrNeedMore {
				t.Fatalf("%q: Sniff(first %d of %d bytes): %v", tc.cfg.ServerName, i, len(flight), err)
			}
		}
		// What follows the hello (the client's next flight) changes nothing.
		more := append(bytes.Clone(flight), 0x14, 3, 3, 0, 1, 1, 0x17, 3, 3, 0, 5, 1, 2, 3, 4, 5)
		if got, err := ServerName(more); err != nil || got != tc.want {
			t.Errorf("%q: with bytes after the hello: %q, %v", tc.cfg.ServerName, got, err)
		}
	}
}

func TestServerNameFragmented(t *testing.T) {
	flight := captureHello(t, &tls.Config{ServerName: "frag.example"})
	if n := int(flight[3])<<8 | int(flight[4]); n+recordHeaderLen != len(flight) {
		t.Fatalf("crypto/tls sent %d records' worth; the test expects one", len(flight))
	}
	for _, size := range []int{1, 3, 4, 5, 100, 512} {
		frag := refragment(flight, size)
		if size < 40 && len(frag) > MaxPeek {
			// A 1-byte-per-record hello is six times as long; past MaxPeek it is refused.
			if _, err := ServerName(frag); err == nil || errors.Is(err, ErrNeedMore) {
				t.Errorf("size %d: %d bytes accepted: %v", size, len(frag), err)
			}
			continue
		}
		got, err := ServerName(frag)
		if err != nil || got != "frag.example" {
			t.Errorf("size %d: %q, %v", size, got, err)
		}
		for i := range len(frag) {
			if _, err := ServerName(frag[:i]); err != ErrNeedMore {
				t.Fatalf("size %d: prefix %d: %v", size, i, err)
			}
		}
	}
}

func TestServerNameMalformed(t *testing.T) {
	good := helloWithSNI("ok.example")
	if got, err := ServerName(good); err != nil || got != "ok.example" {
		t.Fatalf("baseline: %q, %v", got, err)
	}
	hsLen := func(b []byte, n int) []byte { // overwrite the handshake length
		b = bytes.Clone(b)
		b[6], b[7], b[8] = byte(n>>16), byte(n>>8), byte(n)
		return b
	}
	twoExts := append(ext(extServerName, sni(0, "a.example")), ext(extServerName, sni(0, "b.example"))...)
	for name, b := range map[string][]byte{
		"alert record":              {0x15, 3, 3, 0, 2, 2, 40},
		"record version 2":          {0x16, 2, 0, 0, 4, 1, 0, 0, 0},
		"empty record":              {0x16, 3, 1, 0, 0},
		"record over 2^14":          {0x16, 3, 1, 0x40, 0x01},
		"ServerHello":               record([]byte{2, 0, 0, 1, 0}),
		"handshake length huge":     record([]byte{1, 0xff, 0xff, 0xff}),
		"handshake shorter":         hsLen(good, len(good)-9-1),
		"data after hello":          record(append(handshake(helloBody(nil)), 1, 0, 0, 0)),
		"empty hello":               record(handshake(nil)),
		"session id 33":             record(handshake(append(append([]byte{3, 3}, make([]byte, 32)...), 33))),
		"odd cipher suites":         record(handshake(append(append(append([]byte{3, 3}, make([]byte, 32)...), 0, 0, 1, 0x13), 1, 0))),
		"no compression":            record(handshake(append(append(append([]byte{3, 3}, make([]byte, 32)...), 0, 0, 2, 0x13, 1), 0))),
		"extensions overflow":       record(handshake(append(helloBody(nil), 0, 9, 0, 0, 0, 1))),
		"extensions short":          record(handshake(append(helloBody(nil), 0, 1, 0, 0))),
		"extension data overflow":   record(handshake(helloBody([]byte{0, 0, 0, 9, 0, 1}))),
		"extensions trailing byte":  record(handshake(append(helloBody(ext(5, nil)), 7))),
		"two server_name ext":       record(handshake(helloBody(twoExts))),
		"two host_names":            record(handshake(helloBody(ext(extServerName, sni(0, "a.example", 0, "b.example"))))),
		"empty server_name list":    record(handshake(helloBody(ext(extServerName, u16(0))))),
		"server_name list overflow": record(handshake(helloBody(ext(extServerName, []byte{0, 9, 0, 0, 1, 'a'})))),
		"server_name list short":    record(handshake(helloBody(ext(extServerName, []byte{0, 3, 0, 0, 1, 'a', 'b'})))),
		"empty host_name":           helloWithSNI(""),
		"space in name":             helloWithSNI("a b.example"),
		"NUL in name":               helloWithSNI("a\x00.example"),
		"newline in name":           helloWithSNI("a.example\n"),
		"non-ASCII name":            helloWithSNI("bücher.example"),
		"empty label":               helloWithSNI("a..example"),
		"leading dot":               helloWithSNI(".example"),
		"two trailing dots":         helloWithSNI("example.."),
		"label of 64":               helloWithSNI(strings.Repeat("a", 64) + ".example"),
		"name of 254":               helloWithSNI(strings.Repeat("a.", 126) + "aa"),
		"numeric last label":        helloWithSNI("1.2.3.4.5"),
		"octal address":             helloWithSNI("0177.0.0.1"),
		"hex address":               helloWithSNI("0x7f.1"),
		"address with zone":         helloWithSNI("fe80::1%eth0"),
		"bracketed address":         helloWithSNI("[::1]"),
		"port in name":              helloWithSNI("example.com:443"),
		"wildcard":                  helloWithSNI("*.example.com"),
	} {
		if got, err := ServerName(b); err == nil || errors.Is(err, ErrNeedMore) {
			t.Errorf("%s: ServerName = %q, %v; want an error", name, got, err)
		}
	}
}

func TestServerNameAccepted(t *testing.T) {
	for in, want := range map[string]string{
		"EXAMPLE.com":                   "example.com",
		"example.com.":                  "example.com",
		"_acme-challenge.x.example":     "_acme-challenge.x.example",
		"xn--bcher-kva.example":         "xn--bcher-kva.example",
		"localhost":                     "localhost",
		"192.0.2.1":                     "192.0.2.1",
		"2001:DB8::1":                   "2001:db8::1",
		"dead.beef":                     "dead.beef",
		strings.Repeat("a", 63) + ".x":  strings.Repeat("a", 63) + ".x",
		strings.Repeat("a.", 126) + "a": strings.Repeat("a.", 126) + "a",
	} {
		if got, err := ServerName(helloWithSNI(in)); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	// No extensions at all, an unknown name type only, other extensions around server_name.
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"no extensions":     {record(handshake(helloBody(nil))), ""},
		"empty extensions":  {record(handshake(helloBody([]byte{}))), ""},
		"other name type":   {record(handshake(helloBody(ext(extServerName, sni(7, "x"))))), ""},
		"with unknown type": {record(handshake(helloBody(ext(extServerName, sni(7, "x", 0, "b.example"))))), "b.example"},
		"among others": {record(handshake(helloBody(append(append(ext(0x0a0a, nil), ext(extServerName, sni(0, "c.example"))...),
			ext(16, []byte{0, 3, 2, 'h', '2'})...)))), "c.example"},
	} {
		if got, err := ServerName(tc.b); err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, tc.want)
		}
	}
}

func TestServerNameNeverPastMaxPeek(t *testing.T) {
	// A record whose declared length ends past MaxPeek is refused at once, not awaited.
	b := []byte{0x16, 3, 1, 0x40, 0x00, 1, 0, 0x3f, 0xfc}
	if _, err := ServerName(b); err == nil || errors.Is(err, ErrNeedMore) {
		t.Fatalf("got %v", err)
	}
	// Records of one byte each: the hello cannot end within MaxPeek.
	flood := bytes.Repeat([]byte{0x16, 3, 1, 0, 1, 0}, MaxPeek)
	flood[5], flood[17] = typeClientHello, 0x10 // a 4 KiB hello, 6 bytes per hello byte
	if _, err := ServerName(flood); err == nil || errors.Is(err, ErrNeedMore) {
		t.Fatalf("got %v", err)
	}
	if _, err := ServerName(flood[:MaxPeek-1]); err != ErrNeedMore {
		t.Fatalf("below MaxPeek: %v", err)
	}
}
