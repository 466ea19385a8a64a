package daemon_test

import (
	"slices"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// socketProbe tries socket(2) and socketpair(2) calls inside a sandbox and prints one line
// per call: its name and "ok" or the errno's name. Run as root inside, so that only
// seccomp and the kernel, not missing privileges, decide.
const socketProbe = `
import errno, socket
A = socket
cases = [
    ("tcp", "socket", A.AF_INET, A.SOCK_STREAM, 0),
    ("tcp6-flags", "socket", A.AF_INET6, A.SOCK_STREAM | A.SOCK_NONBLOCK | A.SOCK_CLOEXEC, A.IPPROTO_TCP),
    ("udp", "socket", A.AF_INET, A.SOCK_DGRAM | A.SOCK_CLOEXEC, A.IPPROTO_UDP),
    ("udp6", "socket", A.AF_INET6, A.SOCK_DGRAM, 0),
    ("icmp-dgram", "socket", A.AF_INET, A.SOCK_DGRAM, A.IPPROTO_ICMP),
    ("netlink-route", "socket", A.AF_NETLINK, A.SOCK_RAW | A.SOCK_CLOEXEC, 0),
    ("unix-pair", "socketpair", A.AF_UNIX, A.SOCK_STREAM, 0),
    ("mptcp", "socket", A.AF_INET, A.SOCK_STREAM, 262),
    ("mptcp6", "socket", A.AF_INET6, A.SOCK_STREAM | A.SOCK_NONBLOCK, 262),
    ("sctp", "socket", A.AF_INET, A.SOCK_STREAM, 132),
    ("sctp-seqpacket", "socket", A.AF_INET, A.SOCK_SEQPACKET, 132),
    ("udplite", "socket", A.AF_INET, A.SOCK_DGRAM, 136),
    ("dccp", "socket", A.AF_INET, 6, 33),
    ("raw", "socket", A.AF_INET, A.SOCK_RAW, A.IPPROTO_ICMP),
    ("packet", "socket", 17, A.SOCK_RAW, 0),
    ("netlink-audit", "socket", A.AF_NETLINK, A.SOCK_RAW, 9),
    ("netlink-uevent", "socket", A.AF_NETLINK, A.SOCK_DGRAM, 15),
    ("netlink-diag", "socket", A.AF_NETLINK, A.SOCK_RAW, 4),
    ("inet-pair", "socketpair", A.AF_INET, A.SOCK_STREAM, 132),
]
for name, call, fam, typ, proto in cases:
    try:
        if call == "socket":
            socket.socket(fam, typ, proto).close()
        else:
            for s in socket.socketpair(fam, typ, proto):
                s.close()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)))
`

// TestSocketProtocols: inside a real sandbox, TCP, UDP, ping sockets, routing netlink and
// AF_UNIX pairs can be made; MPTCP, SCTP, UDP-Lite, DCCP, raw and packet sockets, other
// netlink protocols and non-unix socket pairs are refused by seccomp (runc: EPERM, and
// EPROTONOSUPPORT for netlink; the kernel alone would create several of them or load
// their modules). Under runsc the same profile applies inside gVisor (which answers EPERM
// for every refusal).
func TestSocketProtocols(t *testing.T) {
	e := newEnv(t)
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt})
			r := e.sh(sb.ID, "root", "python3 -c '"+socketProbe+"'")
			if r.code != 0 {
				t.Fatalf("probe: %+v", r)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				if f := strings.Fields(line); len(f) == 2 {
					got[f[0]] = f[1]
				}
			}
			t.Logf("%s: %v", rt, got)
			refused := map[string]string{
				"mptcp": "EPERM", "mptcp6": "EPERM", "sctp": "EPERM", "sctp-seqpacket": "EPERM",
				"udplite": "EPERM", "dccp": "EPERM", "raw": "EPERM", "packet": "EPERM", "inet-pair": "EPERM",
				"netlink-audit": "EPROTONOSUPPORT", "netlink-uevent": "EPROTONOSUPPORT", "netlink-diag": "EPROTONOSUPPORT",
			}
			for name, errno := range refused {
				if rt == "runsc" {
					errno = "EPERM" // gVisor ignores a rule's errno
				}
				if got[name] != errno {
					t.Errorf("%s: %s, want %s (refused by seccomp)", name, got[name], errno)
				}
			}
			allowed := map[string][]string{
				"tcp": {"ok"}, "tcp6-flags": {"ok"}, "udp": {"ok"}, "udp6": {"ok"},
				"netlink-route": {"ok"}, "unix-pair": {"ok"},
				// The network namespace's ping_group_range decides (EACCES), not seccomp;
				// gVisor's host network stack has no ping sockets (EAFNOSUPPORT).
				"icmp-dgram": {"ok", "EACCES", "EAFNOSUPPORT"},
			}
			for name, want := range allowed {
				if !slices.Contains(want, got[name]) {
					t.Errorf("%s: %s, want one of %v", name, got[name], want)
				}
			}
			// sudo (libaudit opens a NETLINK_AUDIT socket) stays quiet.
			if rt != "runsc" {
				if r := e.sh(sb.ID, "", "sudo -n true"); r.code != 0 || strings.TrimSpace(r.stderr) != "" {
					t.Errorf("sudo: %+v", r)
				}
			}
		})
	}
}
