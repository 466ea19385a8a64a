package clusterfront

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/kubeapi"
	"github.com/moatdev/moat/internal/sandbox"
)

// Labels and annotations the front writes on its Pods. The node agent's own (moat.dev/allow,
// moat.dev/tier, moat.dev/credentials, the taint and moat.dev/node) are in kube/moatnode;
// they are repeated here as strings because the main module does not import the agent's.
const (
	LabelFront     = "moat.dev/front"      // "true" on every Pod the front made
	LabelOwnerID   = "moat.dev/owner-id"   // 32 hex of the owner's SHA-256: lists by owner
	LabelSandboxID = "moat.dev/sandbox-id" // set once the Pod runs: the sandbox's ID

	AnnotationOwner       = "moat.dev/owner"
	AnnotationE2BTemplate = "moat.dev/e2b-template" // the E2B template ID the create named
	AnnotationMetadata    = "moat.dev/metadata"     // the create's metadata, JSON
	AnnotationExpiresAt   = "moat.dev/expires-at"   // RFC 3339: the front deletes the Pod then
	AnnotationDaemonURL   = "moat.dev/daemon-url"   // on a Node: its daemon's API

	annotationAllow       = "moat.dev/allow"
	annotationTier        = "moat.dev/tier"
	annotationCredentials = "moat.dev/credentials"
	taintKey              = "moat.dev/sandbox"
	labelNode             = "moat.dev/node"
	labelRuntimePrefix    = "moat.dev/runtime-"

	containerIDPrefix = "moat://"
	maxMetadata       = 16 << 10 // bytes of JSON metadata kept on a Pod
)

// podRequest is a create, from either API, reduced to what a Pod on a moat node carries.
type podRequest struct {
	Owner       string
	Template    string // moat template (the container's image)
	E2BTemplate string // as the E2B create named it ("" for the native API)
	Runtime     string
	Env         map[string]string
	Allow       []string // run-phase allow rules; none: deny-all
	Tier        string
	Credentials []v1.Credential // secret and hosts only
	Metadata    map[string]string
	CPUs        float64
	MemoryBytes int64
	DiskBytes   int64
	Timeout     time.Duration // 0: none
}

// ownerID is the label value naming an owner (label values are limited to 63 bytes of a
// narrow alphabet; owner names are not).
func ownerID(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(h[:16])
}

// buildPod is the Pod that makes the sandbox r asks for: on a moat node (the taint
// tolerated, the node selector), never restarted, with a short grace period (the node
// agent deletes the sandbox once it has passed). Pure.
func buildPod(r podRequest, now time.Time) (*kubeapi.Pod, error) {
	if r.Template == "" {
		return nil, fmt.Errorf("no template: name one: %w", errdefs.ErrInvalidArgument)
	}
	if !validOwner(r.Owner) {
		return nil, fmt.Errorf("owner %q: %w", r.Owner, errdefs.ErrInvalidArgument)
	}
	ann := map[string]string{AnnotationOwner: r.Owner}
	if r.E2BTemplate != "" {
		ann[AnnotationE2BTemplate] = r.E2BTemplate
	}
	if len(r.Metadata) > 0 {
		b, _ := json.Marshal(r.Metadata)
		if len(b) > maxMetadata {
			return nil, fmt.Errorf("metadata: %d bytes of JSON, at most %d: %w", len(b), maxMetadata, errdefs.ErrInvalidArgument)
		}
		ann[AnnotationMetadata] = string(b)
	}
	if r.Timeout > 0 {
		ann[AnnotationExpiresAt] = now.Add(r.Timeout).UTC().Format(time.RFC3339)
	}
	for _, h := range r.Allow {
		if h == "" || strings.ContainsAny(h, ", \t\n;@") {
			return nil, fmt.Errorf("allow rule %q: %w", h, errdefs.ErrInvalidArgument)
		}
	}
	if len(r.Allow) > 0 {
		ann[annotationAllow] = strings.Join(r.Allow, ",")
	}
	if r.Tier != "" {
		ann[annotationTier] = r.Tier
	}
	if len(r.Credentials) > 0 {
		var parts []string
		for _, c := range r.Credentials {
			if c.Secret == "" || len(c.Hosts) == 0 || c.Header != "" || c.Template != "" || c.PathPrefix != "" || len(c.Methods) > 0 || c.PlainHTTP {
				return nil, fmt.Errorf("credential %q: through the cluster front a binding names a secret and its hosts only: %w", c.Secret, errdefs.ErrInvalidArgument)
			}
			for _, h := range c.Hosts {
				if h == "" || strings.ContainsAny(h, ", \t\n;@/") {
					return nil, fmt.Errorf("credential %s: host %q: %w", c.Secret, h, errdefs.ErrInvalidArgument)
				}
			}
			if strings.ContainsAny(c.Secret, ", \t\n;@") {
				return nil, fmt.Errorf("credential %q: %w", c.Secret, errdefs.ErrInvalidArgument)
			}
			parts = append(parts, c.Secret+"@"+strings.Join(c.Hosts, ","))
		}
		ann[annotationCredentials] = strings.Join(parts, ";")
	}
	sel := map[string]string{labelNode: "true"}
	if r.Runtime != "" {
		if !validOwner(r.Runtime) {
			return nil, fmt.Errorf("runtime %q: %w", r.Runtime, errdefs.ErrInvalidArgument)
		}
		sel[labelRuntimePrefix+r.Runtime] = "true"
	}
	c := kubeapi.Container{Name: "main", Image: r.Template}
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.Env = append(c.Env, kubeapi.EnvVar{Name: k, Value: r.Env[k]})
	}
	if r.CPUs < 0 || r.MemoryBytes < 0 || r.DiskBytes < 0 {
		return nil, fmt.Errorf("negative limits: %w", errdefs.ErrInvalidArgument)
	}
	lim := map[string]string{}
	if r.CPUs > 0 {
		lim["cpu"] = strconv.FormatInt(int64(r.CPUs*1000+0.5), 10) + "m"
	}
	if r.MemoryBytes > 0 {
		lim["memory"] = strconv.FormatInt(r.MemoryBytes, 10)
	}
	if r.DiskBytes > 0 {
		lim["ephemeral-storage"] = strconv.FormatInt(r.DiskBytes, 10)
	}
	if len(lim) > 0 {
		// Requests equal to the limits: the scheduler places by them.
		c.Resources = kubeapi.ResourceRequirements{Limits: lim, Requests: lim}
	}
	grace, no := int64(1), false
	return &kubeapi.Pod{
		APIVersion: "v1", Kind: "Pod",
		Metadata: kubeapi.ObjectMeta{
			GenerateName: "moat-",
			Labels:       map[string]string{LabelFront: "true", LabelOwnerID: ownerID(r.Owner)},
			Annotations:  ann,
		},
		Spec: kubeapi.PodSpec{
			NodeSelector:                  sel,
			RestartPolicy:                 "Never",
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			Tolerations:                   []kubeapi.Toleration{{Key: taintKey, Operator: "Equal", Value: "true", Effect: "NoSchedule"}},
			Containers:                    []kubeapi.Container{c},
		},
	}, nil
}

// sandboxOf returns the ID of the sandbox a Pod became: its container's moat:// ID, once
// the node agent made it. Pure.
func sandboxOf(p *kubeapi.Pod) (string, bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if id, ok := strings.CutPrefix(cs.ContainerID, containerIDPrefix); ok && sandbox.IsFullID(id) {
			return id, true
		}
	}
	return "", false
}

// podOutcome says where a Pod being made stands: ready (running, with a sandbox), still
// coming, or failed with the reason to give the client. Pure.
func podOutcome(p *kubeapi.Pod) (ready bool, failed error) {
	switch p.Status.Phase {
	case "Running":
		_, ok := sandboxOf(p)
		return ok, nil
	case "Failed", "Succeeded":
		why := strings.TrimSpace(p.Status.Reason + ": " + p.Status.Message)
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.Message != "" {
				why += " (" + t.Message + ")"
			}
		}
		if p.Status.Reason == "UnsupportedByMoat" {
			return false, fmt.Errorf("the moat node refused the sandbox: %s: %w", why, errdefs.ErrInvalidArgument)
		}
		return false, fmt.Errorf("the sandbox failed on node %s: %s: %w", p.Spec.NodeName, why, errdefs.ErrUnavailable)
	}
	return false, nil
}

// unschedulable is the scheduler's reason a Pending Pod has no node yet ("" if none).
func unschedulable(p *kubeapi.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == "PodScheduled" && c.Status == "False" {
			return c.Message
		}
	}
	return ""
}

// expired reports whether the front should delete the Pod: its E2B timeout has passed.
// Pure.
func expired(p *kubeapi.Pod, now time.Time) bool {
	s := p.Metadata.Annotations[AnnotationExpiresAt]
	if s == "" {
		return false
	}
	t, err := time.Parse(time.RFC3339, s)
	return err == nil && !now.Before(t)
}

// podMetadata is the create's metadata kept on the Pod.
func podMetadata(p *kubeapi.Pod) map[string]string {
	md := map[string]string{}
	_ = json.Unmarshal([]byte(p.Metadata.Annotations[AnnotationMetadata]), &md)
	return md
}

// toE2BListed describes a running Pod's sandbox as E2B's list does. Pure.
func toE2BListed(p *kubeapi.Pod) (apiserver.E2BListed, bool) {
	id, ok := sandboxOf(p)
	if !ok || p.Status.Phase != "Running" || p.Metadata.DeletionTimestamp != nil {
		return apiserver.E2BListed{}, false
	}
	e := apiserver.E2BListed{SandboxID: id, TemplateID: p.Metadata.Annotations[AnnotationE2BTemplate], ClientID: "moat",
		State: "running", EnvdVersion: apiserver.EnvdVersion, Metadata: podMetadata(p), VolumeMounts: []any{}}
	if e.TemplateID == "" && len(p.Spec.Containers) > 0 {
		e.TemplateID = p.Spec.Containers[0].Image
	}
	if p.Metadata.CreationTimestamp != nil {
		e.StartedAt = *p.Metadata.CreationTimestamp
	}
	if t, err := time.Parse(time.RFC3339, p.Metadata.Annotations[AnnotationExpiresAt]); err == nil {
		e.EndAt = t
	}
	if len(p.Spec.Containers) > 0 {
		lim := p.Spec.Containers[0].Resources.Limits
		if m, err := strconv.ParseInt(strings.TrimSuffix(lim["cpu"], "m"), 10, 64); err == nil && strings.HasSuffix(lim["cpu"], "m") {
			e.CPUCount = int((m + 999) / 1000)
		}
		if b, err := strconv.ParseInt(lim["memory"], 10, 64); err == nil {
			e.MemoryMB = b >> 20
		}
		if b, err := strconv.ParseInt(lim["ephemeral-storage"], 10, 64); err == nil {
			e.DiskSizeMB = b >> 20
		}
	}
	return e, true
}

// toV1Sandbox describes a Pod's sandbox as the native list does, from the Pod alone: the
// full record is GET /v1/sandboxes/{id}, answered by the node. Pure.
func toV1Sandbox(p *kubeapi.Pod) (v1.Sandbox, bool) {
	id, ok := sandboxOf(p)
	if !ok {
		return v1.Sandbox{}, false
	}
	s := v1.Sandbox{ID: id, State: "running", Metadata: podMetadata(p)}
	switch {
	case p.Metadata.DeletionTimestamp != nil:
		s.State = "deleting"
	case p.Status.Phase != "Running":
		s.State, s.Error = "error", strings.TrimSpace(p.Status.Reason+" "+p.Status.Message)
	}
	if len(s.Metadata) == 0 {
		s.Metadata = nil
	}
	if len(p.Spec.Containers) > 0 {
		s.Template = p.Spec.Containers[0].Image
	}
	for k := range p.Spec.NodeSelector {
		if rt, ok := strings.CutPrefix(k, labelRuntimePrefix); ok {
			s.Runtime = rt
		}
	}
	if p.Metadata.CreationTimestamp != nil {
		s.CreatedAt, s.UpdatedAt = *p.Metadata.CreationTimestamp, *p.Metadata.CreationTimestamp
	}
	if t, err := time.Parse(time.RFC3339, p.Metadata.Annotations[AnnotationExpiresAt]); err == nil {
		s.ExpiresAt = &t
	}
	s.Tier = p.Metadata.Annotations[annotationTier]
	return s, true
}

// mayUse reports whether c may see and use the sandbox of Pod p. Pure.
func mayUse(c Caller, p *kubeapi.Pod) bool {
	return p.Metadata.Labels[LabelFront] == "true" && (c.Admin || p.Metadata.Annotations[AnnotationOwner] == c.Owner)
}

// sortPods orders Pods oldest first (stable list answers).
func sortPods(ps []kubeapi.Pod) {
	slices.SortStableFunc(ps, func(a, b kubeapi.Pod) int {
		var ta, tb time.Time
		if a.Metadata.CreationTimestamp != nil {
			ta = *a.Metadata.CreationTimestamp
		}
		if b.Metadata.CreationTimestamp != nil {
			tb = *b.Metadata.CreationTimestamp
		}
		if c := ta.Compare(tb); c != 0 {
			return c
		}
		return strings.Compare(a.Metadata.Name, b.Metadata.Name)
	})
}
