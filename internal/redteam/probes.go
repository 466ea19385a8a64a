// Package redteam is moat's self-test of its boundary on this host (`moat redteam`): a
// battery of escape and exfiltration probes run inside fresh sandboxes, each checked at
// the receiver — a host canary file, loopback sinks the runner starts itself, the host's
// module list — besides what the probe reports from inside. Probes are data (Probe); the
// verdict of each is a pure function of what was observed (Evaluate), table-tested.
package redteam

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Probe is one attack: what it tries, the Python program run inside the sandbox (with
// {{NAME}} placeholders filled from Vars), and the check of what was seen.
type Probe struct {
	Name string
	What string
	// Threat names the THREAT_MODEL rows the probe re-checks.
	Threat string
	// Sandbox: "main" (all probes in parallel) or "limits" (a sandbox with small limits,
	// where the resource probes run one after the other).
	Sandbox string
	// NeedsPin: the probe needs the sink's name pinned by the daemon's egress hosts
	// (only a daemon redteam started itself has it); otherwise it is skipped.
	NeedsPin bool
	// Control: the probe must reach its sink (it proves the receivers see traffic).
	Control bool
	// MayKill: the sandbox being ended at its limit (LimitEnded) is an outcome the check
	// judges, not a failure to run the probe.
	MayKill bool
	Script  string
	Check   func(o Observation) (pass bool, reason string)
}

// Observation is everything known about one probe's run: its output inside and what the
// receivers on the host saw.
type Observation struct {
	Runtime string
	Exit    int
	Inside  map[string]any // the JSON object the script printed last (nil: none)
	Raw     string         // its output, for the reason of a failure
	// Receivers.
	CanarySecret  string // the host canary file's content
	SecretValue   string // the value of the secret bound to the main sandbox
	CanaryWritten bool   // the file the probe must not create on the host exists
	SinkSeen      bool   // a TCP, UDP or DNS sink received this probe's token
	SinkDetail    string
	NewModules    []string // modules loaded while the probes ran
	// HostSysrq: the host kernel log got a sysrq line while the probes ran (nil
	// error reading it: HostLog is true).
	HostSysrq  bool
	HostLog    bool
	ExpectCaps uint64 // CapBnd = CapEff = CapPrm of the sandbox
	Err        string // the exec failed (not the probe)
	// LimitEnded: the command or the whole sandbox was ended at a limit: the OOM killer
	// (exit 137 or the daemon says so) or the pids limit (the daemon says so; under
	// runsc the Sentry's own threads count against it).
	LimitEnded bool
}

// Result is one probe's verdict.
type Result struct {
	Name   string `json:"name"`
	What   string `json:"what"`
	Threat string `json:"threat,omitempty"`
	// Status: "pass", "fail" or "skip".
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// Evaluate gives a probe's verdict from its observation (pure).
func Evaluate(p Probe, o Observation) Result {
	r := Result{Name: p.Name, What: p.What, Threat: p.Threat}
	killed := p.MayKill && o.LimitEnded
	if o.Err != "" && !killed {
		r.Status, r.Reason = "fail", "could not run the probe: "+o.Err
		return r
	}
	// A canary's content in any output is a host file read, whichever probe printed it.
	if o.CanarySecret != "" && strings.Contains(o.Raw, o.CanarySecret) {
		r.Status, r.Reason = "fail", "the host canary file's content was read inside"
		return r
	}
	if o.SecretValue != "" && strings.Contains(o.Raw, o.SecretValue) {
		r.Status, r.Reason = "fail", "a bound secret's value was readable inside"
		return r
	}
	if o.SinkSeen && !p.Control {
		r.Status, r.Reason = "fail", "a host sink received this probe's token: "+o.SinkDetail
		return r
	}
	if o.Inside == nil && !killed {
		r.Status, r.Reason = "fail", fmt.Sprintf("the probe printed no report (exit %d): %s", o.Exit, clip(o.Raw))
		return r
	}
	ok, why := p.Check(o)
	r.Status, r.Reason = "fail", why
	if ok {
		r.Status = "pass"
	}
	return r
}

// ParseInside takes the last line of output that is a JSON object.
func ParseInside(out string) map[string]any {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var m map[string]any
		if json.Unmarshal([]byte(strings.TrimSpace(lines[i])), &m) == nil && m != nil {
			return m
		}
	}
	return nil
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// str and num read a report's fields.
func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }
func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

// opened lists the report's keys whose value is "ok" (an operation that must fail but
// succeeded), sorted.
func opened(m map[string]any) []string {
	var out []string
	for k, v := range m {
		if v == "ok" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func allRefused(o Observation) (bool, string) {
	if got := opened(o.Inside); len(got) > 0 {
		return false, "succeeded inside: " + strings.Join(got, ", ")
	}
	return true, "every attempt refused"
}

// capNumbers are the capability numbers of the names runtime.Capabilities() uses.
func capNumbers() map[string]uint {
	return map[string]uint{
		"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_FSETID": 4,
		"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_LINUX_IMMUTABLE": 9,
		"CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13,
		"CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15, "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17,
		"CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21,
		"CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25,
		"CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27, "CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29,
		"CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31, "CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33,
		"CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35, "CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37,
		"CAP_PERFMON": 38, "CAP_BPF": 39, "CAP_CHECKPOINT_RESTORE": 40,
	}
}

// CapMask is the bit mask of capability names (unknown names are an error).
func CapMask(names []string) (uint64, error) {
	nums := capNumbers()
	var m uint64
	for _, n := range names {
		b, ok := nums[n]
		if !ok {
			return 0, fmt.Errorf("unknown capability %q", n)
		}
		m |= 1 << b
	}
	return m, nil
}

// CapNames names the bits of a mask, for reasons.
func CapNames(m uint64) []string {
	var out []string
	for n, b := range capNumbers() {
		if m&(1<<b) != 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func checkCaps(o Observation) (bool, string) {
	var bad []string
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd"} {
		v, err := strconv.ParseUint(str(o.Inside, k), 16, 64)
		if err != nil {
			return false, k + " unreadable: " + str(o.Inside, k)
		}
		if extra := v &^ o.ExpectCaps; extra != 0 {
			bad = append(bad, fmt.Sprintf("%s has %s beyond moat's set", k, strings.Join(CapNames(extra), ",")))
		}
	}
	for _, k := range []string{"CapInh", "CapAmb"} {
		v, err := strconv.ParseUint(str(o.Inside, k), 16, 64)
		if err != nil || v != 0 {
			bad = append(bad, k+" = "+str(o.Inside, k)+", want 0")
		}
	}
	if len(bad) > 0 {
		return false, strings.Join(bad, "; ")
	}
	return true, "CapEff/CapPrm/CapBnd within moat's set, CapInh = CapAmb = 0"
}

func checkSeccomp(o Observation) (bool, string) {
	mode := str(o.Inside, "Seccomp")
	if o.Runtime == "runsc" {
		// gVisor's Sentry is the system-call boundary; the host seccomp filter applies to
		// the Sentry itself, not visible inside.
		return true, "runsc: the Sentry implements system calls (inside Seccomp: " + mode + ")"
	}
	if mode != "2" {
		return false, "Seccomp: " + mode + ", want 2 (filter)"
	}
	// no_new_privs stays off on purpose (sudo inside; runtime/spec.go): the bounding set
	// already caps what a setuid exec can gain, which the capabilities probe checks.
	return true, "seccomp filter mode (no_new_privs " + str(o.Inside, "NoNewPrivs") + ")"
}

func checkUIDMap(o Observation) (bool, string) {
	m := strings.Fields(str(o.Inside, "uid_map"))
	if len(m) < 3 {
		return false, "uid_map unreadable: " + str(o.Inside, "uid_map")
	}
	if o.Runtime == "runsc" {
		// gVisor's user namespace is the Sentry's own; its root is not a host uid.
		return true, "runsc: uid_map is the Sentry's (" + strings.Join(m, " ") + ")"
	}
	if m[0] == "0" && m[1] == "0" {
		return false, "root inside is host root (uid_map " + strings.Join(m, " ") + ")"
	}
	if m[2] == "4294967295" {
		return false, "the whole host uid range is mapped"
	}
	return true, "root inside is host uid " + m[1] + " (range " + m[2] + ")"
}

func checkModules(o Observation) (bool, string) {
	if len(o.NewModules) > 0 {
		return false, "the host loaded kernel modules while probing: " + strings.Join(o.NewModules, ", ")
	}
	return true, "no module loaded on the host (" + fmt.Sprint(len(o.Inside)) + " socket families tried)"
}

func checkHostFS(o Observation) (bool, string) {
	if o.CanaryWritten {
		return false, "the probe created a file in the host canary directory"
	}
	return allRefused(o)
}

func checkSinks(o Observation) (bool, string) {
	// SinkSeen is judged before Check; here only the inside report remains.
	ok, why := allRefused(o)
	if !ok {
		return ok, why
	}
	return true, "no sink received anything"
}

func checkControl(o Observation) (bool, string) {
	if !o.SinkSeen {
		return false, "the allowed request did not reach the sink: the receivers cannot see anything (" + str(o.Inside, "ctl") + ")"
	}
	return true, "the allowed request reached the pinned sink"
}

func checkPids(o Observation) (bool, string) {
	if o.LimitEnded {
		return true, "the sandbox was ended at its pids limit: " + clip(o.Err)
	}
	n, limit := num(o.Inside, "forks"), num(o.Inside, "limit")
	if n >= limit {
		return false, fmt.Sprintf("%.0f processes started under a limit of %.0f", n, limit)
	}
	return true, fmt.Sprintf("stopped after %.0f processes (limit %.0f)", n, limit)
}

func checkMemory(o Observation) (bool, string) {
	if o.LimitEnded {
		return true, "the OOM killer ended the allocation over the memory limit"
	}
	if str(o.Inside, "alloc") == "ok" {
		return false, fmt.Sprintf("allocated and touched %.0f MiB over the sandbox's memory limit", num(o.Inside, "mib"))
	}
	return true, "the allocation over the memory limit failed: " + str(o.Inside, "alloc")
}

// checkDevices: every attempt refused — except that under runsc /proc/sysrq-trigger is
// the Sentry's own file, so a write to it is judged where it would land: the host kernel
// log must show no sysrq line.
func checkDevices(o Observation) (bool, string) {
	if o.HostSysrq {
		return false, "the host kernel log shows a sysrq request made while probing"
	}
	got := opened(o.Inside)
	if o.Runtime == "runsc" && o.HostLog {
		got = slices.DeleteFunc(got, func(k string) bool { return k == "write /proc/sysrq-trigger" })
	}
	if len(got) > 0 {
		return false, "succeeded inside: " + strings.Join(got, ", ")
	}
	if o.Runtime == "runsc" && o.Inside["write /proc/sysrq-trigger"] == "ok" {
		return true, "every attempt refused or stayed in the Sentry (sysrq: nothing in the host kernel log)"
	}
	return true, "every attempt refused"
}

// checkCredential: the value never showed inside (Evaluate's check of the output), and
// the request reached the sink, which saw the injected value (SinkSeen: the probe tested
// something) and echoed it.
func checkCredential(o Observation) (bool, string) {
	if str(o.Inside, "placeholder") != "set" {
		return false, "the sandbox has no placeholder for the bound secret"
	}
	if !o.SinkSeen {
		return false, "the sink never received the injected value (" + str(o.Inside, "echo") + "): nothing was tested"
	}
	if str(o.Inside, "echo") != "answered" {
		return false, "the echoing upstream's answer did not come back: " + str(o.Inside, "echo")
	}
	return true, "injected upstream, absent from environments, files and the echoed answer"
}
