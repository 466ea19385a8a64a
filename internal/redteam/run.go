package redteam

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	moatruntime "github.com/moatdev/moat/internal/runtime"
	"github.com/moatdev/moat/sdk"
)

// PinnedName is the name a daemon that redteam starts itself pins to the TCP sink's
// address (127.0.0.1) through its egress hosts.
const PinnedName = "sink.redteam.moat.test"

// PlainName is pinned to the same sink but has no credential bound, so connections to it
// are spliced, not intercepted: proxy-tricks uses it, so that the proxy's own checks are
// what it tests (the interceptor would answer some tricks itself).
const PlainName = "plain.redteam.moat.test"

// PinnedNames are the names a daemon for redteam pins to 127.0.0.1.
func PinnedNames() []string { return []string{PinnedName, PlainName} }

// Limits of the "limits" sandbox.
const (
	limitPids   = 64
	limitMemMiB = 128
)

// Sinks are the loopback receivers: a TCP and a UDP listener that answer and record what
// reaches them, and a DNS server (meant as the daemon's upstream) that records the names
// asked. Everything is on 127.0.0.1.
type Sinks struct {
	tcp net.Listener
	udp net.PacketConn
	dns net.PacketConn

	mu   sync.Mutex
	seen []string // "tcp: …", "udp: …", "dns: …" payloads
	wg   sync.WaitGroup
}

// StartSinks opens the sinks on ephemeral loopback ports.
func StartSinks() (*Sinks, error) {
	s := &Sinks{}
	var err error
	if s.tcp, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("redteam: TCP sink: %w", err)
	}
	if s.udp, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
		s.tcp.Close()
		return nil, fmt.Errorf("redteam: UDP sink: %w", err)
	}
	if s.dns, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
		s.tcp.Close()
		s.udp.Close()
		return nil, fmt.Errorf("redteam: DNS sink: %w", err)
	}
	s.wg.Add(3)
	go s.serveTCP()
	go s.servePackets(s.udp, "udp", func(b []byte) []byte { return []byte("moat-redteam-sink\n") })
	go s.servePackets(s.dns, "dns", nxdomain)
	return s, nil
}

// DNSAddr is the DNS sink's address (ip:port), for the daemon's EgressDNS.
func (s *Sinks) DNSAddr() string { return s.dns.LocalAddr().String() }

func (s *Sinks) port(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func (s *Sinks) record(kind string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, kind+": "+string(b))
}

func (s *Sinks) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 4096)
			n, _ := c.Read(buf)
			if n > 0 {
				s.record("tcp", buf[:n])
			} else {
				s.record("tcp", []byte("(connection without data)"))
			}
			body := []byte("moat-redteam-sink\n")
			if bytes.HasPrefix(buf[:n], []byte("GET /echo/")) {
				body = slices.Clone(buf[:n]) // an upstream that echoes the request, headers included
			}
			_, _ = fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}()
	}
}

func (s *Sinks) servePackets(pc net.PacketConn, kind string, answer func([]byte) []byte) {
	defer s.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		s.record(kind, dnsText(buf[:n]))
		if a := answer(buf[:n]); a != nil {
			_, _ = pc.WriteTo(a, from)
		}
	}
}

// dnsText makes a DNS query's name readable (labels joined by dots) so a token split
// across labels is still found; other payloads come back unchanged.
func dnsText(b []byte) []byte {
	out := slices.Clone(b)
	for i := range out {
		if out[i] < 0x20 {
			out[i] = '.'
		}
	}
	return out
}

// nxdomain answers a DNS query with NXDOMAIN (nil for what is not a query).
func nxdomain(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	a := slices.Clone(q)
	a[2] = 0x81 | (q[2] & 0x01)
	a[3] = 0x83
	for i := 6; i < 12; i++ {
		a[i] = 0
	}
	return a
}

// Close stops the sinks and waits for their handlers.
func (s *Sinks) Close() {
	s.tcp.Close()
	s.udp.Close()
	s.dns.Close()
	s.wg.Wait()
}

// Seen reports what reached the sinks carrying token (and, for tls, any TLS handshake).
func (s *Sinks) Seen(token string, tls bool) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.seen {
		if strings.Contains(p, token) || (tls && strings.HasPrefix(p, "tcp: \x16\x03")) {
			return true, clip(strings.ToValidUTF8(p, "?"))
		}
	}
	return false, ""
}

// SeenBoth reports a payload that carries both a and b.
func (s *Sinks) SeenBoth(a, b string) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.seen {
		if strings.Contains(p, a) && strings.Contains(p, b) {
			return true, "the injected request"
		}
	}
	return false, ""
}

// Options configure a run.
type Options struct {
	Runtime string // "" the daemon's default
	// Pinned: the daemon pins PinnedName to 127.0.0.1 (a daemon redteam started); the
	// proxy probes are skipped without it.
	Pinned bool
	// Socket and RunDir are the daemon's, looked for inside.
	Socket, RunDir string
	// Only, when set, runs just the probes of these names.
	Only     []string
	Progress func(string)
	Log      *slog.Logger
}

// Report is a run's outcome.
type Report struct {
	Runtime string   `json:"runtime"`
	Results []Result `json:"results"`
	Passed  int      `json:"passed"`
	Failed  int      `json:"failed"`
	Skipped int      `json:"skipped"`
	Seconds float64  `json:"seconds"`
}

// Run creates the probe sandboxes, runs the battery and deletes them.
func Run(ctx context.Context, c *sdk.Client, sinks *Sinks, o Options) (*Report, error) {
	begun := time.Now()
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	expect, err := CapMask(moatruntime.Capabilities())
	if err != nil {
		return nil, err
	}
	var probes []Probe
	for _, p := range Catalog() {
		if len(o.Only) == 0 || slices.Contains(o.Only, p.Name) {
			probes = append(probes, p)
		}
	}
	canaryDir, err := os.MkdirTemp("", "moat-redteam-")
	if err != nil {
		return nil, fmt.Errorf("redteam: canary directory: %w", err)
	}
	defer os.RemoveAll(canaryDir)
	secret := "moat-canary-" + randHex(12)
	canary := filepath.Join(canaryDir, "canary")
	if err := os.WriteFile(canary, []byte(secret+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("redteam: canary file: %w", err)
	}
	run := "rt" + randHex(6)
	vars := map[string]string{
		"CANARY": canary, "CANARYDIR": canaryDir, "PIN": PinnedName, "PIN2": PlainName,
		"TCP": sinks.port(sinks.tcp.Addr()), "UDP": sinks.port(sinks.udp.LocalAddr()), "DNS": sinks.port(sinks.dns.LocalAddr()),
		"SOCK": o.Socket, "RUNDIR": o.RunDir,
		"PIDS": strconv.Itoa(limitPids), "MEM": strconv.Itoa(limitMemMiB),
	}
	modsBefore := modules()
	klog, klogErr := watchKmsg()
	if klogErr != nil && o.Log != nil {
		o.Log.Warn("cannot watch the host kernel log; the sysrq write is judged inside only", "err", klogErr)
	}

	// The sandboxes, in parallel.
	var policy *v1.Policy
	if o.Pinned {
		policy = &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: PinnedNames()}}}
	}
	all := map[string]v1.CreateSandboxRequest{
		"main":   {Runtime: o.Runtime, Policy: policy},
		"pids":   {Runtime: o.Runtime, Pids: limitPids},
		"memory": {Runtime: o.Runtime, MemoryBytes: limitMemMiB << 20},
	}
	reqs := map[string]v1.CreateSandboxRequest{}
	for _, p := range probes {
		if p.NeedsPin && !o.Pinned {
			continue
		}
		req := all[p.Sandbox]
		req.Labels = map[string]string{"moat.redteam": run}
		reqs[p.Sandbox] = req
	}
	// The secret bound to the main sandbox (credential-leak).
	secretName, secretValue := "", ""
	if o.Pinned && slices.ContainsFunc(probes, func(p Probe) bool { return p.Name == "credential-leak" }) {
		secretName, secretValue = "REDTEAM_"+strings.ToUpper(randHex(4)), "moat-secret-"+randHex(12)
		host := PinnedName + ":" + vars["TCP"]
		if err := c.SetSecret(ctx, secretName, secretValue, &v1.SecretScope{Hosts: []string{host}, PlainHTTP: true}); err != nil {
			return nil, fmt.Errorf("redteam: a secret for the credential probe: %w", err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := c.DeleteSecret(dctx, secretName); err != nil && o.Log != nil {
				o.Log.Warn("deleting the probe secret", "name", secretName, "err", err)
			}
		}()
		req := reqs["main"]
		req.Credentials = []v1.Credential{{Secret: secretName, Hosts: []string{host}, PlainHTTP: true}}
		reqs["main"] = req
	}
	vars["SECRETENV"] = secretName
	ids := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	progress("creating the probe sandboxes")
	for name, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.Create(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("creating the %s probe sandbox: %w", name, err))
				return
			}
			ids[name] = sb.ID
		}()
	}
	wg.Wait()
	defer func() {
		for _, id := range ids {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := c.Delete(dctx, id); err != nil && o.Log != nil {
				o.Log.Warn("deleting a probe sandbox", "id", id, "err", err)
			}
			cancel()
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rt := o.Runtime
	for _, id := range ids {
		if sb, err := c.Get(ctx, id); err == nil {
			rt = sb.Runtime
		}
	}

	obs := make([]Observation, len(probes))
	tokens := make([]string, len(probes))
	progress(fmt.Sprintf("running %d probes in %s", len(probes), rt))
	for i, p := range probes {
		tokens[i] = run + "-" + p.Name
		obs[i] = Observation{Runtime: rt, ExpectCaps: expect}
		if p.NeedsPin && !o.Pinned {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			exec(ctx, c, ids[p.Sandbox], Render(p, withToken(vars, tokens[i])), &obs[i])
		}()
	}
	wg.Wait()
	newMods := diff(modsBefore, modules())
	hostSysrq := klogErr == nil && klog.sysrq()

	rep := &Report{Runtime: rt}
	for i, p := range probes {
		if p.NeedsPin && !o.Pinned {
			rep.Results = append(rep.Results, Result{Name: p.Name, What: p.What, Threat: p.Threat, Status: "skip",
				Reason: "needs " + PinnedName + " pinned by the daemon's egress hosts: run redteam with no daemon running (it starts its own)"})
			rep.Skipped++
			continue
		}
		o := &obs[i]
		o.CanarySecret = secret
		o.SecretValue = secretValue
		if _, err := os.Stat(filepath.Join(canaryDir, "written")); err == nil {
			o.CanaryWritten = true
		}
		o.SinkSeen, o.SinkDetail = sinks.Seen(tokens[i], p.Name == "proxy-tricks")
		if p.Name == "credential-leak" {
			o.SinkSeen, o.SinkDetail = sinks.SeenBoth(tokens[i], secretValue)
		}
		if p.Name == "module-autoload" {
			o.NewModules = newMods
		}
		if p.Name == "devices-proc" {
			o.HostSysrq, o.HostLog = hostSysrq, klogErr == nil
		}
		r := Evaluate(p, *o)
		switch r.Status {
		case "pass":
			rep.Passed++
		case "fail":
			rep.Failed++
		}
		rep.Results = append(rep.Results, r)
	}
	rep.Seconds = time.Since(begun).Seconds()
	return rep, nil
}

func withToken(vars map[string]string, tok string) map[string]string {
	m := make(map[string]string, len(vars)+1)
	for k, v := range vars {
		m[k] = v
	}
	m["TOKEN"] = tok
	return m
}

// lockedBuffer collects a command's stdout and stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func exec(ctx context.Context, c *sdk.Client, id, script string, o *Observation) {
	var out lockedBuffer
	ectx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	code, err := c.Exec(ectx, id, sdk.ExecRequest{User: "root", Cmd: "/usr/bin/python3", Args: []string{"-c", script}, Stdout: &out, Stderr: &out, End: &sdk.ExitError{}})
	o.Exit = code
	o.Raw = out.b.String()
	o.LimitEnded = code == 137 || (err != nil && (strings.Contains(err.Error(), "OOM killer") || strings.Contains(err.Error(), "pids limit")))
	o.Inside = ParseInside(o.Raw)
	if err != nil && o.Inside == nil {
		o.Err = err.Error()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// modules lists the host's loaded kernel modules.
func modules() []string {
	data, err := os.ReadFile("/proc/modules")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}

// diff lists what after has that before had not.
func diff(before, after []string) []string {
	var out []string
	for _, m := range after {
		if !slices.Contains(before, m) {
			out = append(out, m)
		}
	}
	return out
}
