package daemon_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/redteam"
)

// redteamEnv is a daemon set up as `moat redteam` sets up its own: the sink name pinned to
// the TCP sink's address, the DNS sink as the proxy's upstream resolver.
func redteamEnv(t *testing.T, weaken daemon.TestWeaken) (*env, *redteam.Sinks) {
	t.Helper()
	sinks, err := redteam.StartSinks()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sinks.Close)
	e := newEnvWith(t, func(c *daemon.Config) {
		c.EgressHosts = egress.Hosts{}
		for _, n := range redteam.PinnedNames() {
			c.EgressHosts[n] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		c.EgressDNS = sinks.DNSAddr()
		c.TestWeaken = weaken
	})
	return e, sinks
}

// TestRedteam: the whole battery passes on every runtime of this host against a daemon
// configured as shipped, and no probe is skipped.
func TestRedteam(t *testing.T) {
	e, sinks := redteamEnv(t, daemon.TestWeaken{})
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			rep, err := redteam.Run(context.Background(), e.c, sinks, redteam.Options{Runtime: rt, Pinned: true,
				Socket: filepath.Join(e.runDir, "moat.sock"), RunDir: e.runDir})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Results {
				t.Logf("%-16s %-4s %s", r.Name, r.Status, r.Reason)
				if r.Status != "pass" {
					t.Errorf("%s: %s: %s", r.Name, r.Status, r.Reason)
				}
			}
			if rep.Runtime != rt || rep.Passed != len(redteam.Catalog()) {
				t.Errorf("runtime %s, %d of %d passed", rep.Runtime, rep.Passed, len(redteam.Catalog()))
			}
			t.Logf("%s: %.1fs", rt, rep.Seconds)
		})
	}
	// Deletes finish in the background: wait for the probe sandboxes to be gone.
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := e.c.List(context.Background())
		if err == nil && len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe sandboxes left behind: %+v (%v)", list, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRedteamWeakened: daemons deliberately weakened by the test-only daemon.TestWeaken
// fail the probes that cover what was weakened, naming it, and pass the others. Granting
// CAP_NET_RAW alone is caught by the capabilities probe while raw sockets stay refused
// (the seccomp filter allows no raw socket either); without the filter too, the raw
// socket opens and raw-sockets and seccomp fail. (module-autoload is left out: without
// seccomp a probe could load a module on this host.)
func TestRedteamWeakened(t *testing.T) {
	for _, tc := range []struct {
		name   string
		weaken daemon.TestWeaken
		want   map[string]string // probe → status
		names  map[string]string // probe → what its reason must name
	}{
		{"NET_RAW", daemon.TestWeaken{ExtraCaps: []string{"CAP_NET_RAW"}},
			map[string]string{"capabilities": "fail", "raw-sockets": "pass", "seccomp": "pass", "host-filesystem": "pass", "direct-egress": "pass", "proxy-control": "pass"},
			map[string]string{"capabilities": "CAP_NET_RAW"}},
		{"NET_RAW without seccomp", daemon.TestWeaken{ExtraCaps: []string{"CAP_NET_RAW"}, NoSeccomp: true},
			map[string]string{"capabilities": "fail", "raw-sockets": "fail", "seccomp": "fail", "host-filesystem": "pass", "direct-egress": "pass", "proxy-control": "pass"},
			map[string]string{"capabilities": "CAP_NET_RAW", "raw-sockets": "raw AF_INET icmp", "seccomp": "Seccomp: 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, sinks := redteamEnv(t, tc.weaken)
			var only []string
			failed := 0
			for name, st := range tc.want {
				only = append(only, name)
				if st == "fail" {
					failed++
				}
			}
			rep, err := redteam.Run(context.Background(), e.c, sinks, redteam.Options{Runtime: "runc", Pinned: true,
				Socket: filepath.Join(e.runDir, "moat.sock"), RunDir: e.runDir, Only: only})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Results {
				t.Logf("%-16s %-4s %s", r.Name, r.Status, r.Reason)
				if r.Status != tc.want[r.Name] {
					t.Errorf("%s: %s (%s), want %s", r.Name, r.Status, r.Reason, tc.want[r.Name])
				}
				if n := tc.names[r.Name]; n != "" && !strings.Contains(r.Reason, n) {
					t.Errorf("%s: reason %q does not name %q", r.Name, r.Reason, n)
				}
			}
			if len(rep.Results) != len(only) || rep.Failed != failed {
				t.Errorf("%d results, %d failed; want %d, %d", len(rep.Results), rep.Failed, len(only), failed)
			}
		})
	}
}
