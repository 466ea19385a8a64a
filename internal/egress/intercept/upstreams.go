package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Upstreams keeps a sandbox's upstream connections open between its client connections to
// the same host and port, so that a new client connection does not pay a new upstream
// TCP and TLS handshake. One per sandbox, never shared between sandboxes: a pooled
// connection carries that sandbox's requests only. Safe for concurrent use.
type Upstreams struct {
	rootCAs  *x509.CertPool
	sessions tls.ClientSessionCache

	mu sync.Mutex
	m  map[upstreamKey]*http.Transport
}

type upstreamKey struct {
	host  string // normalized
	port  int
	plain bool
}

// NewUpstreams returns an empty pool whose TLS connections verify upstreams against
// rootCAs (nil: the system roots), resuming TLS sessions among themselves.
func NewUpstreams(rootCAs *x509.CertPool) *Upstreams {
	return &Upstreams{rootCAs: rootCAs, sessions: tls.NewLRUClientSessionCache(64), m: map[upstreamKey]*http.Transport{}}
}

// Reset makes later requests use new connections and closes the idle ones; a connection
// in use is closed when its request ends. Call it when the sandbox's policy changes (a
// connection dialled under the old one is not reused) and when the sandbox stops.
func (u *Upstreams) Reset() {
	u.mu.Lock()
	old := u.m
	u.m = map[upstreamKey]*http.Transport{}
	u.mu.Unlock()
	for _, t := range old {
		t.CloseIdleConnections()
	}
}

// transport returns the pool's transport for k, made on first use.
func (u *Upstreams) transport(k upstreamKey, handshakeTimeout time.Duration) *http.Transport {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.m[k]
	if t == nil {
		// As many connections as the sandbox's client connections need at once (the
		// proxy caps those), 8 of them kept idle.
		t = newTransport(k, u.rootCAs, u.sessions, handshakeTimeout, 0, 8)
		u.m[k] = t
	}
	return t
}

// dialKey carries, in a request's context, how to reach the upstream: the proxy's dial
// for the client connection the request came on, which connects only to the address the
// proxy checked for it.
type dialKey struct{}

type dialFunc = func(ctx context.Context) (net.Conn, error)

func withDial(ctx context.Context, dial dialFunc) context.Context {
	return context.WithValue(ctx, dialKey{}, dial)
}

func dialFrom(ctx context.Context) (dialFunc, error) {
	d, _ := ctx.Value(dialKey{}).(dialFunc)
	if d == nil {
		return nil, errors.New("intercept: no upstream dial in the request's context")
	}
	return d, nil
}

// newTransport makes the transport to the upstream k: HTTP/1.1 only, uncompressed,
// never through the environment's proxy, dialling through the request's dial, over TLS
// verified for k.host unless k.plain. maxConns bounds its connections (0: no bound),
// maxIdle those it keeps idle.
func newTransport(k upstreamKey, rootCAs *x509.CertPool, sessions tls.ClientSessionCache, handshakeTimeout time.Duration, maxConns, maxIdle int) *http.Transport {
	upstreamTLS := &tls.Config{
		ServerName:         k.host,
		RootCAs:            rootCAs,
		NextProtos:         []string{"http/1.1"},
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: sessions,
	}
	return &http.Transport{
		Proxy: nil, // never the environment's proxy
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if !k.plain {
				return nil, errors.New("intercept: a plain dial for a TLS upstream")
			}
			dial, err := dialFrom(ctx)
			if err != nil {
				return nil, err
			}
			return dial(ctx)
		},
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dial, err := dialFrom(ctx)
			if err != nil {
				return nil, err
			}
			raw, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(raw, upstreamTLS)
			hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
			defer cancel()
			if err := tc.HandshakeContext(hctx); err != nil {
				raw.Close()
				return nil, err
			}
			return tc, nil
		},
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{}, // no h2
		DisableCompression:     true,                                                   // bodies must be readable to be scrubbed
		MaxConnsPerHost:        maxConns,
		MaxIdleConns:           maxIdle,
		MaxIdleConnsPerHost:    maxIdle,
		IdleConnTimeout:        upstreamIdleTime,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
}
