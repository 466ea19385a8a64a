package clusterfront

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
)

// maxTimeout bounds an E2B timeout (E2B's own maximum is 24 hours for paid plans).
const maxTimeout = 24 * time.Hour

// e2bCreate is the body of E2B's POST /sandboxes. Fields the front cannot carry to a
// Pod are decoded only to refuse them by name.
type e2bCreate struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *struct {
		AllowOut           []string        `json:"allowOut"`
		DenyOut            []string        `json:"denyOut"`
		AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
		EgressProxy        json.RawMessage `json:"egressProxy"`
		Rules              json.RawMessage `json:"rules"`
	} `json:"network"`
	AutoResume   json.RawMessage `json:"autoResume"`
	MCP          json.RawMessage `json:"mcp"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

func set(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "{}" && s != "[]"
}

// fromE2B maps an E2B create onto a Pod request. aliases maps E2B template names onto
// moat templates (others are used as they are). Pure.
func fromE2B(req e2bCreate, owner string, aliases map[string]string) (podRequest, error) {
	bad := func(field, why string) (podRequest, error) {
		return podRequest{}, fmt.Errorf("%s: %s: %w", field, why, errdefs.ErrInvalidArgument)
	}
	r := podRequest{Owner: owner, E2BTemplate: req.TemplateID, Env: req.EnvVars, Metadata: req.Metadata}
	if r.E2BTemplate == "" {
		r.E2BTemplate = "base"
	}
	r.Template = r.E2BTemplate
	if t, ok := aliases[r.E2BTemplate]; ok {
		r.Template = t
	}
	if req.Timeout != nil {
		if *req.Timeout < 0 || time.Duration(*req.Timeout)*time.Second > maxTimeout {
			return bad("timeout", fmt.Sprintf("%d seconds: want 0 to %d", *req.Timeout, int64(maxTimeout/time.Second)))
		}
		r.Timeout = time.Duration(*req.Timeout) * time.Second
	}
	switch {
	case req.AutoPause != nil && *req.AutoPause:
		return bad("autoPause", "a sandbox of the cluster front lives as long as its Pod; it cannot pause")
	case set(req.AutoResume):
		return bad("autoResume", "a sandbox of the cluster front cannot pause")
	case set(req.MCP):
		return bad("mcp", "not supported by moat")
	case set(req.VolumeMounts):
		return bad("volumeMounts", "not supported by the cluster front")
	}
	open := req.AllowInternetAccess != nil && *req.AllowInternetAccess
	if n := req.Network; n != nil {
		switch {
		case n.AllowPublicTraffic != nil && *n.AllowPublicTraffic:
			return bad("network.allowPublicTraffic", "moat exposes no sandbox ports publicly")
		case set(n.EgressProxy):
			return bad("network.egressProxy", "not supported by moat")
		case set(n.Rules):
			return bad("network.rules", "not supported by moat")
		case len(n.DenyOut) > 0 && !(len(n.DenyOut) == 1 && n.DenyOut[0] == "0.0.0.0/0"):
			return bad("network.denyOut", "the cluster front's sandboxes reach only the hosts of network.allowOut; deny rules have nothing to narrow")
		}
		r.Allow = slices.Clone(n.AllowOut)
	}
	if open && len(r.Allow) == 0 {
		return bad("allow_internet_access", "a sandbox of the cluster front gets no open internet; name its hosts in network.allowOut")
	}
	return r, nil
}

// fromNative maps a native create onto a Pod request, refusing by name what a Pod on a
// moat node cannot carry. Pure.
func fromNative(req v1.CreateSandboxRequest, c Caller) (podRequest, error) {
	bad := func(field, why string) (podRequest, error) {
		return podRequest{}, fmt.Errorf("%s: %s: %w", field, why, errdefs.ErrInvalidArgument)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"repo", req.Repo != ""}, {"from_snapshot", req.FromSnapshot != ""}, {"user", req.User != ""},
		{"pids", req.Pids != 0}, {"nofile", req.Nofile != 0}, {"io_bps", req.IOBps != 0}, {"io_iops", req.IOIops != 0},
		{"agent_branch_prefix", req.AgentBranchPrefix != ""}, {"git_protected", req.GitProtected != ""},
		{"idle_seconds", req.IdleSeconds != nil}, {"delete_after_seconds", req.DeleteAfterSeconds != nil},
		{"archive", req.Archive}, {"name", req.Name != ""}, {"labels", len(req.Labels) > 0}, {"ask", req.Ask},
		{"ask_wait_seconds", req.AskWaitSeconds != 0}, {"users", len(req.Users) > 0}, {"visibility", req.Visibility != ""},
	} {
		if f.set {
			return bad(f.name, "not offered by the cluster front (a sandbox there is a Pod on a moat node; create on a node's daemon for it)")
		}
	}
	r := podRequest{Owner: c.Owner, Template: req.Template, Runtime: req.Runtime, Env: req.Env, Metadata: req.Metadata,
		CPUs: req.CPUs, MemoryBytes: req.MemoryBytes, DiskBytes: req.DiskBytes, Tier: req.Tier}
	if req.TimeoutSeconds < 0 || time.Duration(req.TimeoutSeconds)*time.Second > maxTimeout {
		return bad("timeout_seconds", fmt.Sprintf("want 0 to %d", int64(maxTimeout/time.Second)))
	}
	r.Timeout = time.Duration(req.TimeoutSeconds) * time.Second
	if p := req.Policy; p != nil {
		if len(p.Phases) > 1 || len(p.Sets) > 0 || p.AskAll || p.AskWait != "" {
			return bad("policy", "the cluster front carries one phase of allow rules (moat.dev/allow); phases, sets and ask are not offered")
		}
		for _, rules := range p.Phases {
			if rules.Net == "allow-all" || len(rules.Deny) > 0 || len(rules.HTTP) > 0 || len(rules.Ask) > 0 {
				return bad("policy", "the cluster front carries allow rules only (no allow-all, deny, http or ask rules)")
			}
			r.Allow = slices.Clone(rules.Allow)
		}
	}
	for _, cr := range req.Credentials {
		if !c.Admin && !slices.Contains(c.Secrets, cr.Secret) {
			return bad("credentials", fmt.Sprintf("secret %q is not granted to this key (--cluster-keys secrets=)", cr.Secret))
		}
	}
	r.Credentials = req.Credentials
	return r, nil
}
