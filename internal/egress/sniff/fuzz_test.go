package sniff

import (
	"crypto/tls"
	"testing"
)

// suffixes are appended to a complete input; a final result must not change.
var suffixes = [][]byte{
	{0},
	[]byte("\r\n\r\nHost: other.example\r\n\r\n"),
	{0x16, 3, 1, 0, 4, 1, 0, 0, 0},
	make([]byte, MaxPeek),
}

// checkFinal fails unless f's result on b is well-formed, and, when it is final (not
// ErrNeedMore), unchanged by appending bytes; and unless a final result on a prefix of b is
// also f's result on b.
func checkFinal[R comparable](t *testing.T, b []byte, f func([]byte) (R, error), name func(R) string) {
	r, err := f(b)
	if err == ErrNeedMore {
		if len(b) >= MaxPeek {
			t.Fatalf("ErrNeedMore for %d bytes", len(b))
		}
	} else {
		if n := name(r); n != "" && (err != nil || !validName(n)) {
			t.Fatalf("name %q with error %v", n, err)
		}
		for _, s := range suffixes {
			r2, err2 := f(append(b[:len(b):len(b)], s...))
			if r2 != r || err2 != err {
				t.Fatalf("appending %d bytes changed %v, %v to %v, %v", len(s), r, err, r2, err2)
			}
		}
	}
	for _, k := range []int{len(b) / 2, len(b) - 1} {
		if k < 0 {
			continue
		}
		if rk, errk := f(b[:k]); errk != ErrNeedMore && (rk != r || errk != err) {
			t.Fatalf("prefix of %d gave %v, %v; all %d bytes gave %v, %v", k, rk, errk, len(b), r, err)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add(captureHello(f, smallHello))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: seed.example\r\n\r\n"))
	f.Add([]byte("SSH-2.0-x\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFinal(t, b, Sniff, func(r Result) string {
			if r.Name != "" && r.Proto == Unknown {
				t.Fatalf("name %q without a protocol", r.Name)
			}
			return r.Name
		})
	})
}

func FuzzServerName(f *testing.F) {
	f.Add(captureHello(f, smallHello))
	f.Add(helloWithSNI("a.example"))
	f.Add(refragment(helloWithSNI("frag.example"), 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFinal(t, b, ServerName, func(s string) string { return s })
	})
}

func FuzzHTTPHost(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.example:80\r\n\r\n"))
	f.Add([]byte("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\nbody"))
	f.Add([]byte("CONNECT [::1]:443 HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFinal(t, b, HTTPHost, func(s string) string { return s })
	})
}

// smallHello makes crypto/tls send a ClientHello of a few hundred bytes (no post-quantum key
// share): the fuzzer minimises every new input, and that is slow for kilobyte-sized ones.
var smallHello = &tls.Config{ServerName: "seed.example", CurvePreferences: []tls.CurveID{tls.X25519}}
