package apiserver

import (
	"errors"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestMetricsAccess(t *testing.T) {
	tok := []byte("0123456789abcdef0123")
	for _, c := range []struct {
		name   string
		token  []byte
		remote string
		auth   string
		want   error
	}{
		{"loopback v4, no token configured", nil, "127.0.0.1:5555", "", nil},
		{"loopback v6", nil, "[::1]:5555", "", nil},
		{"loopback mapped", nil, "[::ffff:127.0.0.1]:5555", "", nil},
		{"other address, no token configured", nil, "192.0.2.7:5555", "", errdefs.ErrPermissionDenied},
		{"other address with some bearer, no token configured", nil, "10.0.0.1:1", "Bearer " + string(tok), errdefs.ErrPermissionDenied},
		{"garbage peer", nil, "not-an-address", "", errdefs.ErrPermissionDenied},
		{"token configured, none given, loopback", tok, "127.0.0.1:1", "", errdefs.ErrUnauthenticated},
		{"token configured, none given", tok, "192.0.2.7:1", "", errdefs.ErrUnauthenticated},
		{"wrong token", tok, "192.0.2.7:1", "Bearer 0123456789abcdef0124", errdefs.ErrUnauthenticated},
		{"prefix of the token", tok, "192.0.2.7:1", "Bearer 0123456789abcdef", errdefs.ErrUnauthenticated},
		{"not bearer", tok, "192.0.2.7:1", "Basic " + string(tok), errdefs.ErrUnauthenticated},
		{"right token", tok, "192.0.2.7:1", "Bearer " + string(tok), nil},
	} {
		err := MetricsAccess(c.token, c.remote, c.auth)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: MetricsAccess = %v, want %v", c.name, err, c.want)
		}
	}
}
