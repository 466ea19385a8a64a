package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestNormalizeName(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	tests := []struct {
		in, want, err string
	}{
		{in: "example.com", want: "example.com"},
		{in: "Example.COM", want: "example.com"},
		{in: "example.com.", want: "example.com"},
		{in: "localhost", want: "localhost"},
		{in: "_dmarc.example.com", want: "_dmarc.example.com"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "r3---sn-x.googlevideo.com", want: "r3---sn-x.googlevideo.com"},
		{in: "1password.com", want: "1password.com"},
		{in: long63 + ".com", want: long63 + ".com"},
		{in: "", err: "empty host name"},
		{in: ".", err: "empty host name"},
		{in: "example.com..", err: "empty label"},
		{in: ".example.com", err: "empty label"},
		{in: "a..b", err: "empty label"},
		{in: "*", err: "contains '*'"},
		{in: "*.example.com", err: "contains '*'"},
		{in: "exa mple.com", err: "contains ' '"},
		{in: "bücher.example", err: "contains"},
		{in: "\u212aelvin.example", err: "contains"}, // Kelvin sign must not lowercase to k
		{in: "-a.example", err: "starting or ending with '-'"},
		{in: "a-.example", err: "starting or ending with '-'"},
		{in: long63 + "a.com", err: "longer than 63"},
		{in: strings.Repeat("a.", 127) + "ab", err: "longer than 253"},
		{in: "10.0.0.1", err: "IP address"},
		{in: "127.1", err: "IP address"},
		{in: "0x7f000001", err: "IP address"},
		{in: "::1", err: "contains ':'"},
		{in: "example.com:443", err: "contains ':'"},
	}
	for _, tt := range tests {
		got, err := NormalizeName(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("NormalizeName(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.err)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("NormalizeName(%q) error %v is not ErrInvalidArgument", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizeName(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNormalizeNameNoAlloc(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = NormalizeName("a.b.example.com.") }); n != 0 {
		t.Errorf("NormalizeName allocates %v times for a canonical name", n)
	}
}

func TestParseRule(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical text
		kind ruleKind
		err  string
	}{
		{in: "example.com", want: "example.com", kind: kindName},
		{in: " Example.COM. ", want: "example.com", kind: kindName},
		{in: "example.com:443", want: "example.com:443", kind: kindName},
		{in: "example.com:0443", want: "example.com:443", kind: kindName},
		{in: "example.com:8000-8100", want: "example.com:8000-8100", kind: kindName},
		{in: "example.com:443-443", want: "example.com:443", kind: kindName},
		{in: "example.com:1-65535", want: "example.com", kind: kindName},
		{in: "*.example.com", want: "*.example.com", kind: kindWildcard},
		{in: "*.Example.com.:443", want: "*.example.com:443", kind: kindWildcard},
		{in: "*.com", want: "*.com", kind: kindWildcard},
		{in: "localhost:8080", want: "localhost:8080", kind: kindName},
		{in: "10.0.0.0/8", want: "10.0.0.0/8", kind: kindCIDR},
		{in: "10.0.0.0/8:5432", want: "10.0.0.0/8:5432", kind: kindCIDR},
		{in: "192.168.1.5", want: "192.168.1.5", kind: kindCIDR},
		{in: "192.168.1.5/32:22", want: "192.168.1.5:22", kind: kindCIDR},
		{in: "0.0.0.0/0", want: "0.0.0.0/0", kind: kindCIDR},

		{in: "", err: "empty rule"},
		{in: "   ", err: "empty rule"},
		{in: "*", err: "net: allow-all"},
		{in: "*:443", err: "net: allow-all"},
		{in: "*.", err: "empty host name"},
		{in: "*.*.example.com", err: "contains '*'"},
		{in: "*example.com", err: "contains '*'"},
		{in: "a.*.example.com", err: "contains '*'"},
		{in: "https://example.com", err: "not a URL"},
		{in: "example.com/path", err: "URL path"},
		{in: "example.com:443/path", err: "not a number"},
		{in: "example.com:", err: "missing port"},
		{in: "example.com:0", err: "out of range"},
		{in: "example.com:65536", err: "out of range"},
		{in: "example.com:99999999999999999999", err: "out of range"},
		{in: "example.com:-1", err: "missing port"},
		{in: "example.com:+443", err: "not a number"},
		{in: "example.com:https", err: "not a number"},
		{in: "example.com:8100-8000", err: "reversed"},
		{in: "example.com:80-", err: "missing port"},
		{in: "example.com:1-2-3", err: "not a number"},
		{in: "10.0.0.1/8", err: "did you mean 10.0.0.0/8"},
		{in: "10.0.0.0/33", err: "invalid CIDR"},
		{in: "10.0.0.0/", err: "invalid CIDR"},
		{in: "10.0.0.1.5", err: "IP address"},
		{in: "fd00::/8", err: "IPv6"},
		{in: "[fd00::/8]:443", err: "IPv6"},
		{in: "::1", err: "IPv6"},
		{in: "[::1]", err: "IPv6"},
		{in: "user@example.com", err: "contains '@'"},
	}
	for _, tt := range tests {
		r, err := parseRule(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseRule(%q) = %v, %v; want error containing %q", tt.in, r, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseRule(%q): %v", tt.in, err)
			continue
		}
		if got := r.String(); got != tt.want || r.kind != tt.kind {
			t.Errorf("parseRule(%q) = %q kind %d; want %q kind %d", tt.in, got, r.kind, tt.want, tt.kind)
		}
		if again, err := parseRule(r.String()); err != nil || again != r {
			t.Errorf("parseRule(%q) does not round-trip: %v, %v", r.String(), again, err)
		}
	}
}
