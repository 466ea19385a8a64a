package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// FromAPIPolicy converts a wire policy (nil stays nil: the default).
func FromAPIPolicy(p *v1.Policy) *policy.Spec {
	if p == nil {
		return nil
	}
	s := policy.Spec{Phase: p.Phase, Sets: p.Sets, Phases: map[string]policy.Rules{}, AskAll: p.AskAll, AskWait: p.AskWait}
	for name, r := range p.Phases {
		s.Phases[name] = policy.Rules{Net: r.Net, Allow: r.Allow, Deny: r.Deny, HTTP: r.HTTP, Ask: r.Ask}
	}
	return &s
}

// ToAPIPolicy converts a policy to its wire form.
func ToAPIPolicy(s policy.Spec) v1.Policy {
	p := v1.Policy{Phase: s.Phase, Sets: s.Sets, Phases: map[string]v1.PolicyRules{}, AskAll: s.AskAll, AskWait: s.AskWait}
	for name, r := range s.Phases {
		p.Phases[name] = v1.PolicyRules{Net: r.Net, Allow: r.Allow, Deny: r.Deny, HTTP: r.HTTP, Ask: r.Ask}
	}
	return p
}

func (s *Server) setPolicy(w http.ResponseWriter, r *http.Request) {
	var req v1.SetPolicyRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Policy == nil && req.Phase == "" {
		writeError(w, fmt.Errorf("give a policy, a phase or both: %w", errdefs.ErrInvalidArgument))
		return
	}
	spec, err := s.tierPolicy(r.Context(), r.PathValue("id"), FromAPIPolicy(req.Policy))
	if err != nil {
		writeError(w, err)
		return
	}
	sb, cut, err := s.sandboxes.SetPolicy(r.Context(), r.PathValue("id"), sandbox.PolicyUpdate{Spec: spec, Phase: req.Phase})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v1.SetPolicyResponse{Sandbox: ToAPI(sb), ConnectionsCut: cut})
}

// egressLog serves GET /v1/sandboxes/{id}/egress?after=SEQ&limit=N. With follow=1 it
// streams entries as NDJSON until the client leaves or the sandbox is deleted; entries of
// connections still open are sent again once they finish.
func (s *Server) egressLog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	after, err := queryInt(q.Get("after"), "after")
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := queryInt(q.Get("limit"), "limit")
	if err != nil {
		writeError(w, err)
		return
	}
	if _, err := s.sandboxes.Get(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	if q.Get("follow") == "" || q.Get("follow") == "0" || q.Get("follow") == "false" {
		list, err := s.events.Egress(r.Context(), id, after, int(limit))
		if err != nil {
			writeError(w, err)
			return
		}
		if list == nil {
			list = []v1.EgressEntry{}
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	s.followEgress(w, r, id, after)
}

func (s *Server) followEgress(w http.ResponseWriter, r *http.Request, id string, after int64) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	open := map[int64]bool{} // entries sent while open, to send again when they finish
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		list, err := s.events.Egress(r.Context(), id, after, 1000)
		if err != nil {
			return
		}
		for _, e := range list {
			after = e.Seq
			if e.Open {
				open[e.Seq] = true
			}
			if enc.Encode(e) != nil {
				return
			}
		}
		if len(open) > 0 {
			if err := s.resendFinished(r.Context(), id, open, enc); err != nil {
				return
			}
		}
		if fl != nil {
			fl.Flush()
		}
		if len(list) == 1000 {
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		if _, err := s.sandboxes.Get(r.Context(), id); errors.Is(err, errdefs.ErrNotFound) {
			return
		}
	}
}

// resendFinished sends again the entries of open that have finished.
func (s *Server) resendFinished(ctx context.Context, id string, open map[int64]bool, enc *json.Encoder) error {
	lowest := int64(-1)
	for seq := range open {
		if lowest < 0 || seq < lowest {
			lowest = seq
		}
	}
	list, err := s.events.Egress(ctx, id, lowest-1, 0)
	if err != nil {
		return err
	}
	for _, e := range list {
		if open[e.Seq] && !e.Open {
			delete(open, e.Seq)
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func queryInt(v, name string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("query parameter %s=%q is not a non-negative integer: %w", name, v, errdefs.ErrInvalidArgument)
	}
	return n, nil
}
