package moatnode

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func basePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "base", Command: []string{"sh", "-c"}, Args: []string{"echo hi"},
		}}},
	}
}

func TestPodToSandbox(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name    string
		mutate  func(*corev1.Pod)
		check   func(*testing.T, v1.CreateSandboxRequest, MainCommand)
		wantErr bool
	}{
		{name: "plain", check: func(t *testing.T, r v1.CreateSandboxRequest, m MainCommand) {
			if r.Template != "base" || r.Runtime != "" || r.Policy != nil || r.Tier != "" || len(r.Credentials) != 0 {
				t.Errorf("req = %+v", r)
			}
			if !reflect.DeepEqual(m, MainCommand{Cmd: "sh", Args: []string{"-c", "echo hi"}}) {
				t.Errorf("main = %+v", m)
			}
			if r.Labels[LabelNode] != "n1" || r.Labels[LabelPodUID] != "uid-1" || r.Metadata[MetaNamespace] != "ns" || r.Metadata[MetaPod] != "p" {
				t.Errorf("labels %v metadata %v", r.Labels, r.Metadata)
			}
			if r.IdleSeconds == nil || *r.IdleSeconds != 0 || r.DeleteAfterSeconds == nil || *r.DeleteAfterSeconds != 0 {
				t.Errorf("lifecycle not disabled")
			}
		}},
		{name: "no command", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Command, p.Spec.Containers[0].Args = nil, nil },
			check: func(t *testing.T, _ v1.CreateSandboxRequest, m MainCommand) {
				if m.Cmd != "" {
					t.Errorf("main = %+v", m)
				}
			}},
		{name: "limits", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
		}, check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
			if r.CPUs != 1.5 || r.MemoryBytes != 256<<20 || r.DiskBytes != 1<<30 {
				t.Errorf("limits %v %v %v", r.CPUs, r.MemoryBytes, r.DiskBytes)
			}
		}},
		{name: "requests when no limits", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
		}, check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
			if r.MemoryBytes != 64<<20 {
				t.Errorf("memory %v", r.MemoryBytes)
			}
		}},
		{name: "runtime class gvisor", mutate: func(p *corev1.Pod) { p.Spec.RuntimeClassName = str("gvisor") },
			check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
				if r.Runtime != "runsc" {
					t.Errorf("runtime %q", r.Runtime)
				}
			}},
		{name: "runtime class unknown", mutate: func(p *corev1.Pod) { p.Spec.RuntimeClassName = str("kata") }, wantErr: true},
		{name: "node selector runtime", mutate: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"moat.dev/runtime-runc": "true"} },
			check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
				if r.Runtime != "runc" {
					t.Errorf("runtime %q", r.Runtime)
				}
			}},
		{name: "node selector isolation gvisor", mutate: func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"moat.dev/isolation-gvisor": "true", "other": "x"}
		}, check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
			if r.Runtime != "runsc" {
				t.Errorf("runtime %q", r.Runtime)
			}
		}},
		{name: "isolation container keeps default", mutate: func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"moat.dev/isolation-container": "true"}
		}, check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
			if r.Runtime != "" {
				t.Errorf("runtime %q", r.Runtime)
			}
		}},
		{name: "conflicting runtimes", mutate: func(p *corev1.Pod) {
			p.Spec.RuntimeClassName = str("runc")
			p.Spec.NodeSelector = map[string]string{"moat.dev/isolation-gvisor": "true"}
		}, wantErr: true},
		{name: "same runtime twice", mutate: func(p *corev1.Pod) {
			p.Spec.RuntimeClassName = str("gvisor")
			p.Spec.NodeSelector = map[string]string{"moat.dev/runtime-runsc": "true"}
		}, check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
			if r.Runtime != "runsc" {
				t.Errorf("runtime %q", r.Runtime)
			}
		}},
		{name: "allow", mutate: func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationAllow: " a.test, *.b.test ,,"} },
			check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
				if r.Policy == nil || r.Policy.Phase != "run" || !reflect.DeepEqual(r.Policy.Phases["run"].Allow, []string{"a.test", "*.b.test"}) {
					t.Errorf("policy %+v", r.Policy)
				}
			}},
		{name: "allow with space inside", mutate: func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationAllow: "a.test b.test"} }, wantErr: true},
		{name: "tier", mutate: func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationTier: "read"} },
			check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
				if r.Tier != "read" {
					t.Errorf("tier %q", r.Tier)
				}
			}},
		{name: "bad tier", mutate: func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationTier: "re ad"} }, wantErr: true},
		{name: "credentials", mutate: func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationCredentials: "GH_TOKEN@api.github.com,github.com; NPM@registry.npmjs.org"}
		}, check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
			want := []v1.Credential{{Secret: "GH_TOKEN", Hosts: []string{"api.github.com", "github.com"}}, {Secret: "NPM", Hosts: []string{"registry.npmjs.org"}}}
			if !reflect.DeepEqual(r.Credentials, want) {
				t.Errorf("credentials %+v", r.Credentials)
			}
		}},
		{name: "credential without hosts", mutate: func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationCredentials: "X@"} }, wantErr: true},
		{name: "env literal", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}} },
			check: func(t *testing.T, r v1.CreateSandboxRequest, _ MainCommand) {
				if r.Env["A"] != "1" {
					t.Errorf("env %v", r.Env)
				}
			}},
		{name: "env from secret refused", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
		}, wantErr: true},
		{name: "envFrom refused", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{}}}
		}, wantErr: true},
		{name: "secret volume refused", mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}}}
		}, wantErr: true},
		{name: "projected token volume ignored", mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}}
		}},
		{name: "two containers", mutate: func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) }, wantErr: true},
		{name: "init container", mutate: func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "i"}} }, wantErr: true},
		{name: "no image", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := basePod()
			if tt.mutate != nil {
				tt.mutate(pod)
			}
			req, main, err := PodToSandbox(pod, "n1")
			if tt.wantErr {
				if !errors.Is(err, ErrUnsupported) {
					t.Fatalf("err = %v, want ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, req, main)
			}
		})
	}
}

// TestNoSecretValueInRequest: whatever a Pod names of Secrets, the request carries no
// value from them (the mapping never reads Secrets; valueFrom is refused outright).
func TestNoSecretValueInRequest(t *testing.T) {
	pod := basePod()
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", Value: "", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "token"}}}}
	if _, _, err := PodToSandbox(pod, "n"); err == nil {
		t.Fatal("a Pod taking env from a Secret was accepted")
	}
}

func FuzzParseAnnotations(f *testing.F) {
	for _, s := range []string{"A@h", "A@h1,h2;B@h3", "", ";;", "A@", "@h", "A@h@h", "A b@h", "a.test,*.b.test", "x\x00y"} {
		f.Add(s, s, s)
	}
	f.Fuzz(func(t *testing.T, allow, tier, creds string) {
		pod := basePod()
		pod.Annotations = map[string]string{AnnotationAllow: allow, AnnotationTier: tier, AnnotationCredentials: creds}
		req, _, err := PodToSandbox(pod, "n")
		if err != nil {
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error not classed: %v", err)
			}
			return
		}
		if req.Policy != nil {
			for _, h := range req.Policy.Phases["run"].Allow {
				if h == "" || containsSpace(h) {
					t.Fatalf("bad allow rule %q", h)
				}
			}
		}
		if req.Tier != "" && !isWord(req.Tier) {
			t.Fatalf("bad tier %q", req.Tier)
		}
		for _, c := range req.Credentials {
			if !isWord(c.Secret) || len(c.Hosts) == 0 {
				t.Fatalf("bad credential %+v", c)
			}
			for _, h := range c.Hosts {
				if h == "" || containsSpace(h) {
					t.Fatalf("bad host %q", h)
				}
			}
		}
	})
}

func containsSpace(s string) bool {
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return true
		}
	}
	return false
}

func TestTemplateForImage(t *testing.T) {
	seen := map[string]string{}
	for _, ref := range []string{"docker.io/library/alpine:3.20", "ghcr.io/Org/Img@sha256:abc", "alpine:3.20", "alpine:3-20",
		"registry.example.test:5000/" + strings.Repeat("x", 300) + ":1"} {
		n := TemplateForImage(ref)
		if err := v1.ValidTemplateName(n); err != nil {
			t.Errorf("%q -> %q: %v", ref, n, err)
		}
		if o, ok := seen[n]; ok {
			t.Errorf("%q and %q -> the same %q", o, ref, n)
		}
		seen[n] = ref
	}
}
