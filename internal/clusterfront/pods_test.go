package clusterfront

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/kubeapi"
)

func i64(v int64) *int64 { return &v }
func yes() *bool         { b := true; return &b }

func TestFromE2B(t *testing.T) {
	aliases := map[string]string{"base": "debian"}
	r, err := fromE2B(e2bCreate{Timeout: i64(300), EnvVars: map[string]string{"A": "1"}, Metadata: map[string]string{"k": "v"}}, "alice", aliases)
	if err != nil || r.Template != "debian" || r.E2BTemplate != "base" || r.Timeout != 300*time.Second || r.Env["A"] != "1" || r.Owner != "alice" || len(r.Allow) != 0 {
		t.Fatalf("default create: %+v %v", r, err)
	}
	r, err = fromE2B(e2bCreate{TemplateID: "host", AllowInternetAccess: yes(), Network: &struct {
		AllowOut           []string        `json:"allowOut"`
		DenyOut            []string        `json:"denyOut"`
		AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
		EgressProxy        json.RawMessage `json:"egressProxy"`
		Rules              json.RawMessage `json:"rules"`
	}{AllowOut: []string{"pypi.org"}}}, "alice", aliases)
	if err != nil || r.Template != "host" || len(r.Allow) != 1 || r.Allow[0] != "pypi.org" {
		t.Fatalf("allowOut: %+v %v", r, err)
	}
	for name, body := range map[string]string{
		"open internet":  `{"allow_internet_access":true}`,
		"denyOut only":   `{"network":{"denyOut":["10.0.0.0/8"]}}`,
		"public traffic": `{"network":{"allowPublicTraffic":true}}`,
		"egress proxy":   `{"network":{"egressProxy":{"url":"x"}}}`,
		"rules":          `{"network":{"rules":{"a":1}}}`,
		"auto pause":     `{"autoPause":true}`,
		"auto resume":    `{"autoResume":{"enabled":true}}`,
		"mcp":            `{"mcp":{"x":1}}`,
		"volumes":        `{"volumeMounts":[{"name":"v"}]}`,
		"negative":       `{"timeout":-1}`,
		"too long":       `{"timeout":86401}`,
	} {
		var req e2bCreate
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		if _, err := fromE2B(req, "alice", aliases); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", name, err)
		}
	}
	// What the SDK sends by default is accepted.
	var req e2bCreate
	_ = json.Unmarshal([]byte(`{"templateID":"base","timeout":300,"secure":true,"autoPause":false,"network":{"denyOut":["0.0.0.0/0"]},"mcp":null,"volumeMounts":[]}`), &req)
	if _, err := fromE2B(req, "alice", aliases); err != nil {
		t.Errorf("the SDK's default create: %v", err)
	}
}

func TestFromNative(t *testing.T) {
	alice := Caller{Owner: "alice", Secrets: []string{"GH"}}
	r, err := fromNative(v1.CreateSandboxRequest{Template: "debian", Runtime: "runsc", CPUs: 0.5, MemoryBytes: 256 << 20, TimeoutSeconds: 60,
		Policy:      &v1.Policy{Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"example.test"}}}, Phase: "run"},
		Credentials: []v1.Credential{{Secret: "GH", Hosts: []string{"api.github.test"}}}}, alice)
	if err != nil || r.Runtime != "runsc" || r.CPUs != 0.5 || r.Timeout != time.Minute || len(r.Allow) != 1 || len(r.Credentials) != 1 {
		t.Fatalf("fromNative: %+v %v", r, err)
	}
	five := int64(5)
	for name, req := range map[string]v1.CreateSandboxRequest{
		"repo":           {Template: "debian", Repo: "/src"},
		"snapshot":       {Template: "debian", FromSnapshot: "snap"},
		"idle":           {Template: "debian", IdleSeconds: &five},
		"name":           {Template: "debian", Name: "x"},
		"users":          {Template: "debian", Users: []v1.UserRequest{{Name: "u"}}},
		"two phases":     {Template: "debian", Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"setup": {}, "run": {}}}},
		"allow-all":      {Template: "debian", Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"run": {Net: "allow-all"}}}},
		"deny rules":     {Template: "debian", Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"run": {Deny: []string{"x"}}}}},
		"ask":            {Template: "debian", Ask: true},
		"secret":         {Template: "debian", Credentials: []v1.Credential{{Secret: "AWS", Hosts: []string{"s3.test"}}}},
		"timeout":        {Template: "debian", TimeoutSeconds: -1},
		"visibility":     {Template: "debian", Visibility: "team"},
		"git prefix":     {Template: "debian", AgentBranchPrefix: "agent/x/"},
		"delete after":   {Template: "debian", DeleteAfterSeconds: &five},
		"io":             {Template: "debian", IOBps: 1},
		"ask wait":       {Template: "debian", AskWaitSeconds: 3},
		"policy sets":    {Template: "debian", Policy: &v1.Policy{Sets: map[string][]string{"a": {"b"}}}},
		"http rules":     {Template: "debian", Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"run": {HTTP: []string{"x GET /"}}}}},
		"archive":        {Template: "debian", Archive: true},
		"labels":         {Template: "debian", Labels: map[string]string{"a": "b"}},
		"git protected":  {Template: "debian", GitProtected: "hold"},
		"nofile":         {Template: "debian", Nofile: 10},
		"pids":           {Template: "debian", Pids: 10},
		"user":           {Template: "debian", User: "root"},
		"io iops":        {Template: "debian", IOIops: 1},
		"policy ask all": {Template: "debian", Policy: &v1.Policy{AskAll: true}},
	} {
		if _, err := fromNative(req, alice); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", name, err)
		}
	}
	// An admin key may bind any secret (the node's daemon still checks the secret's scope).
	if _, err := fromNative(v1.CreateSandboxRequest{Template: "debian", Credentials: []v1.Credential{{Secret: "AWS", Hosts: []string{"s3.test"}}}}, Caller{Owner: "ops", Admin: true}); err != nil {
		t.Errorf("admin binding: %v", err)
	}
}

func TestBuildPod(t *testing.T) {
	now := time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)
	p, err := buildPod(podRequest{Owner: "alice", Template: "debian", E2BTemplate: "base", Runtime: "runsc",
		Env: map[string]string{"B": "2", "A": "1"}, Allow: []string{"pypi.org", "*.npmjs.org"}, Tier: "standard",
		Credentials: []v1.Credential{{Secret: "GH", Hosts: []string{"api.github.test", "uploads.github.test"}}},
		Metadata:    map[string]string{"k": "v"}, CPUs: 0.5, MemoryBytes: 256 << 20, Timeout: time.Minute}, now)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers[0]
	ann := p.Metadata.Annotations
	for k, want := range map[string]string{
		AnnotationOwner: "alice", AnnotationE2BTemplate: "base", AnnotationMetadata: `{"k":"v"}`,
		AnnotationExpiresAt: "2026-12-07T20:01:00Z", "moat.dev/allow": "pypi.org,*.npmjs.org", "moat.dev/tier": "standard",
		"moat.dev/credentials": "GH@api.github.test,uploads.github.test",
	} {
		if ann[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, ann[k], want)
		}
	}
	if p.Metadata.Labels[LabelFront] != "true" || p.Metadata.Labels[LabelOwnerID] != ownerID("alice") || len(ownerID("alice")) != 32 {
		t.Errorf("labels %v", p.Metadata.Labels)
	}
	if p.Spec.NodeSelector["moat.dev/node"] != "true" || p.Spec.NodeSelector["moat.dev/runtime-runsc"] != "true" {
		t.Errorf("node selector %v", p.Spec.NodeSelector)
	}
	if len(p.Spec.Tolerations) != 1 || p.Spec.Tolerations[0].Key != "moat.dev/sandbox" || p.Spec.RestartPolicy != "Never" ||
		*p.Spec.TerminationGracePeriodSeconds != 1 || *p.Spec.AutomountServiceAccountToken {
		t.Errorf("spec %+v", p.Spec)
	}
	if c.Image != "debian" || len(c.Env) != 2 || c.Env[0].Name != "A" || c.Resources.Limits["cpu"] != "500m" ||
		c.Resources.Limits["memory"] != "268435456" || c.Resources.Requests["cpu"] != "500m" {
		t.Errorf("container %+v", c)
	}
	// Without limits the Pod asks for none: the node's defaults apply.
	p, _ = buildPod(podRequest{Owner: "alice", Template: "debian"}, now)
	if len(p.Spec.Containers[0].Resources.Limits) != 0 || len(p.Metadata.Annotations) != 1 {
		t.Errorf("plain Pod: %+v", p)
	}
	for name, r := range map[string]podRequest{
		"no template":     {Owner: "alice"},
		"bad owner":       {Owner: "a b", Template: "debian"},
		"allow injection": {Owner: "alice", Template: "debian", Allow: []string{"a.test,evil.test"}},
		"cred injection":  {Owner: "alice", Template: "debian", Credentials: []v1.Credential{{Secret: "GH", Hosts: []string{"a;X@evil"}}}},
		"cred secret":     {Owner: "alice", Template: "debian", Credentials: []v1.Credential{{Secret: "G;H", Hosts: []string{"a"}}}},
		"cred header":     {Owner: "alice", Template: "debian", Credentials: []v1.Credential{{Secret: "GH", Hosts: []string{"a"}, Header: "X"}}},
		"cred no hosts":   {Owner: "alice", Template: "debian", Credentials: []v1.Credential{{Secret: "GH"}}},
		"runtime":         {Owner: "alice", Template: "debian", Runtime: "run c"},
		"negative":        {Owner: "alice", Template: "debian", CPUs: -1},
		"metadata":        {Owner: "alice", Template: "debian", Metadata: map[string]string{"k": strings.Repeat("x", maxMetadata)}},
	} {
		if _, err := buildPod(r, now); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", name, err)
		}
	}
}

func running(id string) *kubeapi.Pod {
	p := &kubeapi.Pod{Metadata: kubeapi.ObjectMeta{Name: "moat-x", Labels: map[string]string{LabelFront: "true"},
		Annotations: map[string]string{AnnotationOwner: "alice"}}}
	p.Spec.NodeName = "moat-a"
	p.Spec.Containers = []kubeapi.Container{{Name: "main", Image: "debian"}}
	p.Status.Phase = "Running"
	p.Status.ContainerStatuses = []kubeapi.ContainerStatus{{Name: "main", ContainerID: "moat://" + id, Ready: true}}
	return p
}

func TestPodOutcome(t *testing.T) {
	const id = "sb-0123456789ab"
	if ready, err := podOutcome(running(id)); !ready || err != nil {
		t.Errorf("running: %v %v", ready, err)
	}
	if got, ok := sandboxOf(running(id)); !ok || got != id {
		t.Errorf("sandboxOf = %q %v", got, ok)
	}
	for _, bad := range []string{"docker://abc", "moat://", "moat://sb-XYZ", "moat://../x", "moat://sb-0123456789ab/.."} {
		p := running("")
		p.Status.ContainerStatuses[0].ContainerID = bad
		if _, ok := sandboxOf(p); ok {
			t.Errorf("container ID %q read as a sandbox", bad)
		}
		if ready, _ := podOutcome(p); ready {
			t.Errorf("container ID %q: ready", bad)
		}
	}
	p := running(id)
	p.Status.Phase = "Pending"
	if ready, err := podOutcome(p); ready || err != nil {
		t.Errorf("pending: %v %v", ready, err)
	}
	p.Status.Phase, p.Status.Reason, p.Status.Message = "Failed", "UnsupportedByMoat", "envFrom is refused"
	if _, err := podOutcome(p); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "envFrom") {
		t.Errorf("refused: %v", err)
	}
	p.Status.Reason = "SandboxError"
	if _, err := podOutcome(p); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "moat-a") {
		t.Errorf("failed: %v", err)
	}
	p.Status.Phase = "Pending"
	p.Status.Conditions = []kubeapi.Condition{{Type: "PodScheduled", Status: "False", Message: "0/2 nodes are available"}}
	if u := unschedulable(p); u != "0/2 nodes are available" {
		t.Errorf("unschedulable = %q", u)
	}
}

func TestMayUse(t *testing.T) {
	p := running("sb-0123456789ab")
	for _, c := range []struct {
		who  Caller
		want bool
	}{
		{Caller{Owner: "alice"}, true},
		{Caller{Owner: "bob"}, false},
		{Caller{Owner: "ALICE"}, false},
		{Caller{Owner: ""}, false},
		{Caller{Owner: "ops", Admin: true}, true},
	} {
		if got := mayUse(c.who, p); got != c.want {
			t.Errorf("mayUse(%+v) = %v", c.who, got)
		}
	}
	// A Pod the front did not make (kubectl's, with a copied annotation) is nobody's here.
	delete(p.Metadata.Labels, LabelFront)
	if mayUse(Caller{Owner: "alice"}, p) || mayUse(Caller{Owner: "ops", Admin: true}, p) {
		t.Error("a Pod without the front's label is usable")
	}
}

func TestExpiredAndLists(t *testing.T) {
	now := time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)
	p := running("sb-0123456789ab")
	if expired(p, now) {
		t.Error("no expiry: expired")
	}
	p.Metadata.Annotations[AnnotationExpiresAt] = "2026-12-07T20:00:00Z"
	if !expired(p, now) || expired(p, now.Add(-time.Second)) {
		t.Error("expiry")
	}
	p.Metadata.Annotations[AnnotationExpiresAt] = "garbage"
	if expired(p, now) {
		t.Error("a bad expiry expired")
	}
	created := now.Add(-time.Minute)
	p.Metadata.CreationTimestamp = &created
	p.Metadata.Annotations[AnnotationMetadata] = `{"job":"7"}`
	p.Spec.Containers[0].Resources.Limits = map[string]string{"cpu": "1500m", "memory": "536870912"}
	l, ok := toE2BListed(p)
	if !ok || l.SandboxID != "sb-0123456789ab" || l.TemplateID != "debian" || l.CPUCount != 2 || l.MemoryMB != 512 || l.Metadata["job"] != "7" || !l.StartedAt.Equal(created) {
		t.Errorf("toE2BListed = %+v %v", l, ok)
	}
	s, ok := toV1Sandbox(p)
	if !ok || s.ID != "sb-0123456789ab" || s.State != "running" || s.Template != "debian" {
		t.Errorf("toV1Sandbox = %+v %v", s, ok)
	}
	p.Status.Phase, p.Status.Reason = "Failed", "SandboxVanished"
	if _, ok := toE2BListed(p); ok {
		t.Error("a failed Pod listed as running")
	}
	if s, _ := toV1Sandbox(p); s.State != "error" || !strings.Contains(s.Error, "SandboxVanished") {
		t.Errorf("failed Pod: %+v", s)
	}
}

func TestNativeForwarded(t *testing.T) {
	for _, c := range []struct {
		method, rest string
		want         bool
	}{
		{"POST", "envd/process.Process/Start", true},
		{"GET", "terminal", true},
		{"GET", "logs", true},
		{"GET", "egress", true},
		{"PUT", "ports/8080", true},
		{"PUT", "policy", true},
		{"GET", "policy", false},
		{"POST", "export", true},
		{"POST", "stop", false},
		{"POST", "start", false},
		{"POST", "pause", false},
		{"POST", "resume", false},
		{"POST", "fork", false},
		{"POST", "snapshot", false},
		{"POST", "restore", false},
		{"POST", "checkpoint", false},
		{"PUT", "visibility", false},
		{"POST", "something-new", false},
		{"GET", "", false},
	} {
		if got, why := nativeForwarded(c.method, c.rest); got != c.want || !got && why == "" {
			t.Errorf("nativeForwarded(%s %s) = %v %q", c.method, c.rest, got, why)
		}
	}
}

func TestDaemonURL(t *testing.T) {
	for s, want := range map[string]string{
		"http://10.0.0.5:7070":  "http://10.0.0.5:7070",
		"https://node.test/":    "https://node.test",
		"":                      "",
		"10.0.0.5:7070":         "",
		"ftp://x":               "",
		"http://u:p@x":          "",
		"http://x/api":          "",
		"http://x?a=b":          "",
		"http://":               "",
		"http://x#f":            "",
		"unix:///run/moat.sock": "",
	} {
		u, err := daemonURL(s)
		got := ""
		if err == nil {
			got = u.String()
		}
		if got != want || err != nil && !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("daemonURL(%q) = %q %v, want %q", s, got, err, want)
		}
	}
}

func TestStatusClass(t *testing.T) {
	for code, want := range map[int]error{404: errdefs.ErrNotFound, 400: errdefs.ErrInvalidArgument, 409: errdefs.ErrConflict,
		403: errdefs.ErrPermissionDenied, 500: errdefs.ErrUnavailable, http.StatusUnauthorized: errdefs.ErrUnavailable} {
		if got := statusClass(code); got != want {
			t.Errorf("statusClass(%d) = %v", code, got)
		}
	}
}

func TestPrune(t *testing.T) {
	now := time.Now()
	f := &Front{routes: map[string]cached[*kubeapi.Pod]{"old": {nil, now.Add(-routeTTL)}, "new": {nil, now}},
		nodes: map[string]cached[*url.URL]{"old": {nil, now.Add(-nodeTTL)}, "new": {nil, now.Add(-routeTTL)}}}
	f.prune(now)
	if _, ok := f.routes["old"]; ok || len(f.routes) != 1 || len(f.nodes) != 1 {
		t.Errorf("after prune: routes %v nodes %v", f.routes, f.nodes)
	}
}
