package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/inventory"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/tiers"
)

// Inventory: GET /v1/inventory[?host=false] — what each sandbox, template and API key the
// caller may see can reach (internal/inventory). The operator sees every sandbox and key;
// an API key its own sandboxes and itself (never other keys, nor owners).

// SetProtectedPaths sets the operator's protected path globs (moat serve
// --git-protected), shown after gitgate.DefaultProtected() in each sandbox's git section.
func (s *Server) SetProtectedPaths(globs []string) { s.protectedExtra = slices.Clone(globs) }

// TemplateScanner reads what a template gives a sandbox's users: its default user and its
// set-id programs (internal/inventory.ScanSetID). It walks the template's layers: slow
// for big ones, so only ?scan=true asks for it, and only the operator may.
type TemplateScanner interface {
	ScanTemplate(ctx context.Context, name string) (defaultUser string, setid []string, err error)
}

// SetTemplateScanner sets the scanner of GET /v1/inventory?scan=true (nil: not available).
func (s *Server) SetTemplateScanner(t TemplateScanner) { s.templateScan = t }

func (s *Server) inventoryRoutes() []route {
	return []route{{"GET /v1/inventory", s.inventory, byKey}}
}

func (s *Server) inventory(w http.ResponseWriter, r *http.Request) {
	withHost := true
	if v := r.URL.Query().Get("host"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, fmt.Errorf("host=%q: want true or false: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		withHost = b
	}
	ctx := r.Context()
	caller := sandbox.CallerFrom(ctx)
	scan := false
	if v := r.URL.Query().Get("scan"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, fmt.Errorf("scan=%q: want true or false: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		scan = b
	}
	if scan && !caller.Operator {
		writeError(w, fmt.Errorf("scan=true walks template layers on the daemon's host: the operator's only (unix socket): %w", errdefs.ErrPermissionDenied))
		return
	}
	if scan && s.templateScan == nil {
		writeError(w, fmt.Errorf("template scanning is not available in this daemon: %w", errdefs.ErrNotImplemented))
		return
	}
	list, err := s.visible(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	in := inventory.Input{Now: time.Now(), Operator: caller.Operator, APIKey: caller.APIKey,
		ProtectedPaths: append(gitgate.DefaultProtected(), s.protectedExtra...)}
	for _, sb := range list {
		in.Sandboxes = append(in.Sandboxes, inventory.Sandbox{API: ToAPI(sb), Owner: sb.Owner})
	}
	if in.Templates, err = s.templates.List(ctx); err != nil {
		writeError(w, err)
		return
	}
	if caller.Operator {
		if s.keys != nil {
			if in.Keys, err = s.keys.ListAPIKeys(ctx); err != nil {
				writeError(w, err)
				return
			}
		}
	} else {
		in.Keys = []v1.APIKey{{ID: caller.APIKey, Secrets: caller.Secrets, Approver: caller.Approver,
			Max: v1.KeyMaxima{MemoryBytes: caller.Max.MemoryBytes, CPUs: caller.Max.CPUs, Pids: caller.Max.Pids, DiskBytes: caller.Max.DiskBytes}}}
	}
	if scan {
		in.ScanTemplate = func(name string) (string, []string, error) { return s.templateScan.ScanTemplate(ctx, name) }
	}
	set := s.tierSet()
	in.Tier = func(name string) (tiers.Tier, bool) {
		t, err := set.Get(name)
		return t, err == nil
	}
	if withHost && s.doctor != nil {
		rep, err := asDoctorReport(s.doctor(ctx))
		if err != nil {
			writeError(w, err)
			return
		}
		in.Host = &rep
	}
	writeJSON(w, http.StatusOK, inventory.Build(in))
}

// asDoctorReport is the doctor's report (the Deps.Doctor function returns it as any).
func asDoctorReport(v any) (doctor.Report, error) {
	if r, ok := v.(doctor.Report); ok {
		return r, nil
	}
	var r doctor.Report
	b, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return r, fmt.Errorf("doctor report: %w", err)
	}
	return r, nil
}
