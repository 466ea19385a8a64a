package redteam

import (
	"strings"
	"testing"

	moatruntime "github.com/moatdev/moat/internal/runtime"
)

func probe(t *testing.T, name string) Probe {
	t.Helper()
	for _, p := range Catalog() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no probe %q", name)
	return Probe{}
}

func TestCatalogWellFormed(t *testing.T) {
	seen := map[string]bool{}
	vars := map[string]string{"CANARY": "/c", "CANARYDIR": "/d", "PIN": "p", "PIN2": "p2", "TCP": "1", "UDP": "2", "DNS": "3",
		"SOCK": "/s", "RUNDIR": "/r", "PIDS": "4", "MEM": "5", "TOKEN": "tok", "SECRETENV": "S"}
	for _, p := range Catalog() {
		if p.Name == "" || p.What == "" || p.Check == nil || p.Script == "" {
			t.Errorf("%q: incomplete", p.Name)
		}
		if seen[p.Name] {
			t.Errorf("%q twice", p.Name)
		}
		seen[p.Name] = true
		switch p.Sandbox {
		case "main", "pids", "memory":
		default:
			t.Errorf("%q: sandbox %q", p.Name, p.Sandbox)
		}
		if s := Render(p, vars); strings.Contains(s, "{{") {
			t.Errorf("%q: placeholder left: %s", p.Name, s[strings.Index(s, "{{"):][:20])
		}
		if !p.Control && p.Threat == "" {
			t.Errorf("%q names no threat-model row", p.Name)
		}
	}
	if err := CheckNames([]string{"raw-sockets", "host-filesystem"}); err != nil {
		t.Error(err)
	}
	if err := CheckNames([]string{"raw-socket"}); err == nil || !strings.Contains(err.Error(), "raw-sockets") {
		t.Errorf("CheckNames(raw-socket) = %v, want an error naming the probes", err)
	}
}

func TestCapMask(t *testing.T) {
	m, err := CapMask(moatruntime.Capabilities())
	if err != nil {
		t.Fatal(err)
	}
	// Docker's default set minus NET_RAW and MKNOD: bits 0-8 minus 2, 10, 18, 5, 29, 31.
	const want = 0xa00405fb
	if m != want {
		t.Errorf("CapMask = %#x, want %#x (%v)", m, want, CapNames(m^want))
	}
	if _, err := CapMask([]string{"CAP_NOPE"}); err == nil {
		t.Error("unknown capability accepted")
	}
	if got := CapNames(1<<13 | 1<<21); strings.Join(got, ",") != "CAP_NET_RAW,CAP_SYS_ADMIN" {
		t.Errorf("CapNames = %v", got)
	}
}

func TestParseInside(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want string // a key of the result, "" for nil
	}{
		{`{"a": "ok"}`, "a"},
		{"noise\n{\"a\": 1}\n{\"b\": 2}\n", "b"},
		{"{\"a\": 1}\nTraceback (most recent call last):\n", "a"},
		{"Traceback\n", ""},
		{"", ""},
		{"[1,2]\nnull\n", ""},
	} {
		m := ParseInside(tc.out)
		if tc.want == "" {
			if m != nil {
				t.Errorf("ParseInside(%q) = %v, want nil", tc.out, m)
			}
			continue
		}
		if _, ok := m[tc.want]; !ok {
			t.Errorf("ParseInside(%q) = %v, want key %q", tc.out, m, tc.want)
		}
	}
}

func TestEvaluate(t *testing.T) {
	caps, _ := CapMask(moatruntime.Capabilities())
	status := func(eff, bnd, inh, amb, seccomp string) map[string]any {
		return map[string]any{"CapEff": eff, "CapPrm": eff, "CapBnd": bnd, "CapInh": inh, "CapAmb": amb, "Seccomp": seccomp, "NoNewPrivs": "0"}
	}
	for _, tc := range []struct {
		name   string
		probe  string
		o      Observation
		status string
		reason string
	}{
		{"caps as moat sets them", "capabilities", Observation{Inside: status("00000000a00405fb", "00000000a00405fb", "0", "0", "2")}, "pass", ""},
		{"caps fewer is fine", "capabilities", Observation{Inside: status("0", "00000000a00405fb", "0", "0", "2")}, "pass", ""},
		{"NET_RAW granted", "capabilities", Observation{Inside: status("00000000a00425fb", "00000000a00425fb", "0", "0", "2")}, "fail", "CAP_NET_RAW"},
		{"SYS_ADMIN in bounding only", "capabilities", Observation{Inside: status("00000000a00405fb", "00000000a02405fb", "0", "0", "2")}, "fail", "CapBnd has CAP_SYS_ADMIN"},
		{"inheritable set", "capabilities", Observation{Inside: status("00000000a00405fb", "00000000a00405fb", "0000000000000400", "0", "2")}, "fail", "CapInh"},
		{"ambient set", "capabilities", Observation{Inside: status("00000000a00405fb", "00000000a00405fb", "0", "1", "2")}, "fail", "CapAmb"},
		{"caps unreadable", "capabilities", Observation{Inside: map[string]any{}}, "fail", "unreadable"},
		{"seccomp filter", "seccomp", Observation{Runtime: "runc", Inside: status("", "", "", "", "2")}, "pass", ""},
		{"seccomp off on runc", "seccomp", Observation{Runtime: "runc", Inside: status("", "", "", "", "0")}, "fail", "want 2"},
		{"seccomp off on runsc", "seccomp", Observation{Runtime: "runsc", Inside: status("", "", "", "", "0")}, "pass", "Sentry"},
		{"uid map moved", "uid-map", Observation{Runtime: "runc", Inside: map[string]any{"uid_map": "0 3000000 65536"}}, "pass", ""},
		{"uid map identity", "uid-map", Observation{Runtime: "runc", Inside: map[string]any{"uid_map": "0 0 4294967295"}}, "fail", "host root"},
		{"uid map whole range", "uid-map", Observation{Runtime: "crun", Inside: map[string]any{"uid_map": "0 100000 4294967295"}}, "fail", "whole host"},
		{"uid map runsc", "uid-map", Observation{Runtime: "runsc", Inside: map[string]any{"uid_map": "0 0 4294967295"}}, "pass", ""},
		{"uid map garbage", "uid-map", Observation{Runtime: "runc", Inside: map[string]any{"uid_map": ""}}, "fail", "unreadable"},
		{"all refused", "raw-sockets", Observation{Inside: map[string]any{"raw": "refused: PermissionError 1", "packet": "refused: PermissionError 1"}}, "pass", ""},
		{"raw socket opened", "raw-sockets", Observation{Inside: map[string]any{"raw AF_INET icmp": "ok", "packet": "refused: x"}}, "fail", "raw AF_INET icmp"},
		{"sysrq in the Sentry", "devices-proc", Observation{Runtime: "runsc", HostLog: true, Inside: map[string]any{"write /proc/sysrq-trigger": "ok", "open /dev/mem": "refused: x"}}, "pass", "Sentry"},
		{"sysrq on runc", "devices-proc", Observation{Runtime: "runc", HostLog: true, Inside: map[string]any{"write /proc/sysrq-trigger": "ok"}}, "fail", "sysrq-trigger"},
		{"sysrq unjudgeable on runsc", "devices-proc", Observation{Runtime: "runsc", Inside: map[string]any{"write /proc/sysrq-trigger": "ok"}}, "fail", "sysrq-trigger"},
		{"sysrq reached the host", "devices-proc", Observation{Runtime: "runsc", HostLog: true, HostSysrq: true, Inside: map[string]any{"write /proc/sysrq-trigger": "ok"}}, "fail", "host kernel log"},
		{"device opened", "devices-proc", Observation{Inside: map[string]any{"open /dev/mem": "ok"}}, "fail", "/dev/mem"},
		{"canary read by any probe", "capabilities", Observation{CanarySecret: "moat-canary-x", Raw: "moat-canary-x\n", Inside: status("0", "0", "0", "0", "2")}, "fail", "canary"},
		{"canary written", "host-filesystem", Observation{CanaryWritten: true, Inside: map[string]any{"write": "refused: x"}}, "fail", "created a file"},
		{"host fs refused", "host-filesystem", Observation{CanarySecret: "moat-canary-x", Raw: "{}", Inside: map[string]any{"read": "refused: x"}}, "pass", ""},
		{"sink saw token", "direct-egress", Observation{SinkSeen: true, SinkDetail: "udp: tok", Inside: map[string]any{"udp": "refused: timeout"}}, "fail", "sink received"},
		{"sink saw nothing", "dns-exfil", Observation{Inside: map[string]any{"getaddrinfo": "refused: gaierror -2"}}, "pass", ""},
		{"dns answered inside", "dns-exfil", Observation{Inside: map[string]any{"udp 198.18.0.1:53 type 16": "ok"}}, "fail", "type 16"},
		{"control reached", "proxy-control", Observation{SinkSeen: true, Inside: map[string]any{"ctl": "reached"}}, "pass", ""},
		{"control blind", "proxy-control", Observation{Inside: map[string]any{"ctl": "failed: timeout"}}, "fail", "did not reach"},
		{"new module", "module-autoload", Observation{NewModules: []string{"appletalk"}, Inside: map[string]any{}}, "fail", "appletalk"},
		{"no module", "module-autoload", Observation{Inside: map[string]any{"af5": "refused"}}, "pass", ""},
		{"pids held", "pids-limit", Observation{Inside: map[string]any{"forks": 55.0, "limit": 64.0}}, "pass", ""},
		{"pids exceeded", "pids-limit", Observation{Inside: map[string]any{"forks": 128.0, "limit": 64.0}}, "fail", "128 processes"},
		{"pids ended the sandbox", "pids-limit", Observation{LimitEnded: true, Err: "stopped: its pids limit"}, "pass", "ended at its pids limit"},
		{"memory over the limit", "memory-limit", Observation{Inside: map[string]any{"alloc": "ok", "mib": 256.0}}, "fail", "256 MiB"},
		{"memory killed", "memory-limit", Observation{Exit: 137, LimitEnded: true, Inside: map[string]any{"alloc": "started"}}, "pass", "OOM"},
		{"memory sandbox OOM", "memory-limit", Observation{LimitEnded: true, Err: "ended by the OOM killer"}, "pass", "OOM"},
		{"memory error", "memory-limit", Observation{Inside: map[string]any{"alloc": "MemoryError"}}, "pass", "MemoryError"},
		{"secret value in any output", "daemon-socket", Observation{SecretValue: "moat-secret-0123", Raw: "x moat-secret-0123 y", Inside: map[string]any{}}, "fail", "secret"},
		{"credential injected, not seen", "credential-leak", Observation{SecretValue: "moat-secret-0123", SinkSeen: true, Raw: "{}", Inside: map[string]any{"placeholder": "set", "echo": "answered"}}, "pass", ""},
		{"credential echoed back", "credential-leak", Observation{SecretValue: "moat-secret-0123", SinkSeen: true, Raw: `{"found": ["moat-secret-0123"]}`, Inside: map[string]any{"placeholder": "set", "echo": "answered"}}, "fail", "secret"},
		{"credential never injected", "credential-leak", Observation{Inside: map[string]any{"placeholder": "set", "echo": "answered"}}, "fail", "nothing was tested"},
		{"credential no placeholder", "credential-leak", Observation{SinkSeen: true, Inside: map[string]any{"placeholder": "missing"}}, "fail", "no placeholder"},
		{"credential no echo", "credential-leak", Observation{SinkSeen: true, Inside: map[string]any{"placeholder": "set", "echo": "failed: timeout"}}, "fail", "did not come back"},
		{"exec failed", "raw-sockets", Observation{Err: "sandbox stopped"}, "fail", "could not run"},
		{"limit end is no excuse elsewhere", "raw-sockets", Observation{Err: "OOM killer", LimitEnded: true}, "fail", "could not run"},
		{"no report", "raw-sockets", Observation{Exit: 1, Raw: "Traceback: boom"}, "fail", "no report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if o.ExpectCaps == 0 {
				o.ExpectCaps = caps
			}
			r := Evaluate(probe(t, tc.probe), o)
			if r.Status != tc.status || !strings.Contains(r.Reason, tc.reason) || r.Name != tc.probe {
				t.Errorf("Evaluate = %+v, want %s with %q", r, tc.status, tc.reason)
			}
		})
	}
}

func TestDNSHelpers(t *testing.T) {
	q := []byte{0x42, 0x42, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c', 2, 'x', 'y', 0, 0, 1, 0, 1}
	a := nxdomain(q)
	if a[0] != 0x42 || a[2]&0x80 == 0 || a[3]&0x0f != 3 || a[5] != 1 || a[7] != 0 {
		t.Errorf("nxdomain = % x", a)
	}
	if nxdomain([]byte{1, 2}) != nil {
		t.Error("short packet answered")
	}
	if s := string(dnsText(q)); !strings.Contains(s, "abc.xy") {
		t.Errorf("dnsText = %q", s)
	}
}

// FuzzEvaluate: whatever a sandbox prints, parsing and judging it neither panics nor
// passes a probe whose output carries the canary or the secret.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{`{"a": "ok"}`, `{"forks": "x", "limit": null}`, `{"CapEff": 5}`, "{\"uid_map\": [1]}\n", `{"found": ["moat-canary-1"]}`, "\x00{}", `{"alloc": {"x": 1}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		inside := ParseInside(out)
		for _, p := range Catalog() {
			for _, rt := range []string{"runc", "runsc"} {
				o := Observation{Runtime: rt, Raw: out, Inside: inside, CanarySecret: "moat-canary-1", SecretValue: "moat-secret-1", ExpectCaps: 0xa00405fb}
				r := Evaluate(p, o)
				if r.Status != "pass" && r.Status != "fail" {
					t.Fatalf("%s: status %q", p.Name, r.Status)
				}
				if r.Status == "pass" && (strings.Contains(out, "moat-canary-1") || strings.Contains(out, "moat-secret-1")) {
					t.Fatalf("%s passed with a canary in the output", p.Name)
				}
			}
		}
	})
}
