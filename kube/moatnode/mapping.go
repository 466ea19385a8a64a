// Package moatnode is a Kubernetes node backed by one moat daemon: a virtual-kubelet
// provider that turns each Pod bound to the node into a moat sandbox, made and watched
// through the daemon's public API (the sdk package) and nothing else.
//
// The mapping from a Pod to a sandbox request (PodToSandbox) and from a sandbox back to a
// Pod status (PodStatus) are pure functions; Provider does the I/O.
package moatnode

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	v1 "github.com/moatdev/moat/api/v1"
	corev1 "k8s.io/api/core/v1"
)

// Annotations and labels the node agent reads on Pods and writes on Nodes and sandboxes.
const (
	// AnnotationAllow: comma-separated hosts (moat allow rules: "host", "*.host",
	// "host:port", CIDRs) the sandbox may reach in its run phase. Absent: deny-all.
	AnnotationAllow = "moat.dev/allow"
	// AnnotationTier: a moat consequence tier (GET /v1/tiers).
	AnnotationTier = "moat.dev/tier"
	// AnnotationCredentials: bindings of moat secrets to hosts,
	// "SECRET@HOST[,HOST...][;SECRET@HOST...]". The secret is named, never carried: its
	// value stays in the daemon and the daemon checks its scope.
	AnnotationCredentials = "moat.dev/credentials"

	// LabelNode, LabelPodUID: moat labels on each sandbox the agent makes, so that a
	// restarted agent finds its Pods' sandboxes (list by label) and a sandbox is matched
	// to exactly one Pod incarnation.
	LabelNode   = "moat.dev/node"
	LabelPodUID = "moat.dev/pod-uid"
	// MetaNamespace, MetaPod: metadata (not labels: a Pod name may be longer than a label
	// value) naming the Pod on the sandbox.
	MetaNamespace = "k8s-namespace"
	MetaPod       = "k8s-pod"

	// TaintKey is the taint every moat node carries (NoSchedule): only Pods that
	// tolerate it land on moat.
	TaintKey = "moat.dev/sandbox"
	// LabelRuntimePrefix + runtime name = "true" on a node offering that runtime;
	// LabelIsolationPrefix + level likewise for isolation levels.
	LabelRuntimePrefix   = "moat.dev/runtime-"
	LabelIsolationPrefix = "moat.dev/isolation-"

	// AnnotationDaemonURL, on the Node: the node daemon's TCP API, where the cluster front
	// (moat serve --cluster) sends the requests of the node's sandboxes.
	AnnotationDaemonURL = "moat.dev/daemon-url"

	// MainTag is the moat process tag of a Pod's main process (its container's command).
	MainTag = "k8s-main"
)

// ErrUnsupported classes a Pod this node cannot run as asked (the reason says why); the
// Pod is reported Failed rather than retried.
var ErrUnsupported = errors.New("pod not supported by moat")

// MainCommand is the container's command: Cmd with Args, run as the sandbox's main
// process. Empty Cmd: no main process (the sandbox just runs).
type MainCommand struct {
	Cmd     string
	Args    []string
	Workdir string
}

// runtimeAliases maps RuntimeClass names onto moat runtimes.
var runtimeAliases = map[string]string{
	"runc": "runc", "crun": "crun", "runsc": "runsc", "gvisor": "runsc",
}

// isolationRuntime is the runtime a node-selector isolation level asks for ("" = the
// daemon's default).
var isolationRuntime = map[string]string{"gvisor": "runsc", "container": ""}

// PodToSandbox maps a Pod onto the sandbox request that makes it and its main command.
// node names the node (a sandbox label). It refuses (ErrUnsupported) what it cannot keep
// the meaning of: several containers, init containers, environment values from Secrets
// or ConfigMaps (a Kubernetes Secret's value never enters a sandbox: use
// moat.dev/credentials), Secret volumes, conflicting runtime choices, malformed
// annotations. Pure.
func PodToSandbox(pod *corev1.Pod, node string) (v1.CreateSandboxRequest, MainCommand, error) {
	var req v1.CreateSandboxRequest
	var main MainCommand
	bad := func(format string, a ...any) error {
		return fmt.Errorf("pod %s/%s: %s: %w", pod.Namespace, pod.Name, fmt.Sprintf(format, a...), ErrUnsupported)
	}
	if len(pod.Spec.Containers) != 1 {
		return req, main, bad("a moat sandbox runs exactly one container, the pod has %d", len(pod.Spec.Containers))
	}
	if len(pod.Spec.InitContainers) > 0 || len(pod.Spec.EphemeralContainers) > 0 {
		return req, main, bad("init and ephemeral containers are not supported")
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			return req, main, bad("volume %q: Secret volumes are refused (bind moat secrets with %s)", v.Name, AnnotationCredentials)
		}
	}
	c := pod.Spec.Containers[0]
	if c.Image == "" {
		return req, main, bad("container %q has no image", c.Name)
	}
	req.Template = c.Image
	if len(c.EnvFrom) > 0 {
		return req, main, bad("envFrom is refused: environment comes from literal values only")
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return req, main, bad("env %s: valueFrom is refused (a Secret's value never enters a sandbox; bind moat secrets with %s)", e.Name, AnnotationCredentials)
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[e.Name] = e.Value
	}

	// Resources: limits, else requests.
	res := c.Resources.Limits
	if len(res) == 0 {
		res = c.Resources.Requests
	}
	if q, ok := res[corev1.ResourceCPU]; ok {
		req.CPUs = float64(q.MilliValue()) / 1000
	}
	if q, ok := res[corev1.ResourceMemory]; ok {
		req.MemoryBytes = q.Value()
	}
	if q, ok := res[corev1.ResourceEphemeralStorage]; ok {
		req.DiskBytes = q.Value()
	}
	if req.CPUs < 0 || req.MemoryBytes < 0 || req.DiskBytes < 0 {
		return req, main, bad("negative resource limits")
	}

	rt, err := podRuntime(pod)
	if err != nil {
		return req, main, bad("%v", err)
	}
	req.Runtime = rt

	ann := pod.Annotations
	if allow, ok := ann[AnnotationAllow]; ok {
		hosts, err := splitList(allow, ",")
		if err != nil {
			return req, main, bad("%s: %v", AnnotationAllow, err)
		}
		if len(hosts) > 0 {
			req.Policy = &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: hosts}}}
		}
	}
	if t := strings.TrimSpace(ann[AnnotationTier]); t != "" {
		if !isWord(t) {
			return req, main, bad("%s: %q is not a tier name", AnnotationTier, t)
		}
		req.Tier = t
	}
	if s, ok := ann[AnnotationCredentials]; ok {
		creds, err := ParseCredentials(s)
		if err != nil {
			return req, main, bad("%s: %v", AnnotationCredentials, err)
		}
		req.Credentials = creds
	}

	req.Labels = map[string]string{LabelNode: node, LabelPodUID: string(pod.UID)}
	req.Metadata = map[string]string{MetaNamespace: pod.Namespace, MetaPod: pod.Name}
	// A Pod's sandbox lives as long as the Pod: no idle stop, no deletion for disuse.
	zero := int64(0)
	req.IdleSeconds, req.DeleteAfterSeconds = &zero, &zero

	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) > 0 {
		main = MainCommand{Cmd: argv[0], Args: argv[1:], Workdir: c.WorkingDir}
	}
	return req, main, nil
}

// podRuntime is the moat runtime a Pod asks for through runtimeClassName and node
// selectors (moat.dev/runtime-NAME=true, moat.dev/isolation-LEVEL=true); "" for the
// daemon's default. Two different asks are an error.
func podRuntime(pod *corev1.Pod) (string, error) {
	var asks []string
	if rc := pod.Spec.RuntimeClassName; rc != nil && *rc != "" {
		rt, ok := runtimeAliases[*rc]
		if !ok {
			return "", fmt.Errorf("runtimeClassName %q is not a moat runtime (runc, crun, runsc/gvisor)", *rc)
		}
		asks = append(asks, rt)
	}
	keys := make([]string, 0, len(pod.Spec.NodeSelector))
	for k := range pod.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if pod.Spec.NodeSelector[k] != "true" {
			continue
		}
		if name, ok := strings.CutPrefix(k, LabelRuntimePrefix); ok {
			rt, ok := runtimeAliases[name]
			if !ok {
				return "", fmt.Errorf("node selector %s: not a moat runtime", k)
			}
			asks = append(asks, rt)
		} else if lvl, ok := strings.CutPrefix(k, LabelIsolationPrefix); ok {
			rt, ok := isolationRuntime[lvl]
			if !ok {
				return "", fmt.Errorf("node selector %s: not a moat isolation level", k)
			}
			if rt != "" {
				asks = append(asks, rt)
			}
		}
	}
	for _, a := range asks[min(1, len(asks)):] {
		if a != asks[0] {
			return "", fmt.Errorf("conflicting runtimes asked: %s", strings.Join(asks, ", "))
		}
	}
	if len(asks) == 0 {
		return "", nil
	}
	return asks[0], nil
}

// ParseCredentials parses the moat.dev/credentials annotation:
// "SECRET@HOST[,HOST...]" entries separated by ";". Secret names are words
// ([A-Za-z0-9_.-]); hosts are non-empty without spaces, "@", ";" or "/". Pure; the daemon
// decides whether the secret exists and its scope allows the hosts.
func ParseCredentials(s string) ([]v1.Credential, error) {
	entries, err := splitList(s, ";")
	if err != nil {
		return nil, err
	}
	var out []v1.Credential
	seen := map[string]bool{}
	for _, e := range entries {
		name, hostList, ok := strings.Cut(e, "@")
		name = strings.TrimSpace(name)
		if !ok || !isWord(name) {
			return nil, fmt.Errorf("%q: want SECRET@HOST[,HOST...]", e)
		}
		if seen[name] {
			return nil, fmt.Errorf("secret %s bound twice", name)
		}
		seen[name] = true
		hosts, err := splitList(hostList, ",")
		if err != nil || len(hosts) == 0 {
			return nil, fmt.Errorf("%q: no hosts", e)
		}
		for _, h := range hosts {
			if strings.ContainsAny(h, "@;/") {
				return nil, fmt.Errorf("%q: bad host %q", e, h)
			}
		}
		out = append(out, v1.Credential{Secret: name, Hosts: hosts})
	}
	return out, nil
}

// splitList splits s at sep, trims each item and drops empty ones; items holding
// whitespace or control characters are an error.
func splitList(s, sep string) ([]string, error) {
	var out []string
	for _, it := range strings.Split(s, sep) {
		it = strings.TrimSpace(it)
		if it == "" {
			continue
		}
		if strings.IndexFunc(it, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			return nil, fmt.Errorf("%q holds whitespace or control characters", it)
		}
		out = append(out, it)
	}
	return out, nil
}

func isWord(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// TemplateForImage is the moat template name an image reference is pulled as: "k8s-", the
// reference lowercased with every character outside [a-z0-9.-] turned into "-", cut to fit,
// and 8 hex digits of its SHA-256 (distinct references get distinct names). Always a valid
// template name ([a-z0-9][a-z0-9._-]{0,62}). Pure.
func TemplateForImage(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	b := []byte(strings.ToLower(ref))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	body := string(b)
	if len(body) > 50 {
		body = body[:50]
	}
	return "k8s-" + body + "-" + hex.EncodeToString(sum[:4])
}
