package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// touch records a call that acts on the sandbox the request names as a use of it (idle
// stop, sandbox/idle.go): every method but GET and HEAD, so that reading a sandbox's
// record, events, egress log or metrics (moat ls, a dashboard) never keeps it running.
// envd requests count through Sandboxes.Acquire instead.
func (s *Server) touch(r *http.Request) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return
	}
	if id := r.PathValue("id"); id != "" {
		s.sandboxes.Touch(id)
	}
}

// maxSeconds bounds a period in seconds (about 290 years) so that it fits a Duration.
const maxSeconds = int64(1<<63-1) / int64(time.Second)

// seconds turns an optional API number of seconds into a duration (nil stays nil).
func seconds(n *int64) *time.Duration {
	if n == nil {
		return nil
	}
	d := time.Duration(min(*n, maxSeconds)) * time.Second
	if *n < 0 {
		d = -1 // refused by the manager as negative
	}
	return &d
}

// toAPILifecycle is a record's lifecycle settings and state as the API shows them.
func toAPILifecycle(sb *sandbox.Sandbox) v1.Lifecycle {
	last, idleAt, deleteAt := sandbox.LifecycleTimes(sb)
	return v1.Lifecycle{
		IdleSeconds: int64(sb.IdleAfter / time.Second), DeleteAfterSeconds: int64(sb.DeleteAfter / time.Second),
		Archive: sb.Archive, AutoResume: sb.AutoResume, StopReason: sb.StopReason,
		LastUsedAt: last, IdleStopAt: idleAt, DeleteAt: deleteAt,
	}
}

// e2bLifecycleOptions maps an E2B create onto moat's lifecycle options. E2B's own idle
// mechanism is the sandbox's timeout (a client keeps it alive with setTimeout), and its
// processes (a server started in the background) must live until then, so E2B sandboxes
// get no idle stop of moat's. autoResume (with autoPause: what the timeout pauses or
// stops) lets the next envd request or connect bring the sandbox back (Sandbox.AutoResume).
// The unused-deletion period is the daemon's default.
func e2bLifecycleOptions(opts *sandbox.CreateOptions, req e2bCreateRequest) {
	off := time.Duration(0)
	opts.Idle = &off
	opts.AutoResume = req.AutoResume != nil && req.AutoResume.Enabled
}

// Archives lists and removes the drive archives written before sandboxes unused past
// their period were deleted.
type Archives interface {
	Archives(ctx context.Context) ([]v1.Archive, error)
	// DeleteArchive removes the archive of deleted sandbox id (errdefs.ErrNotFound: none).
	DeleteArchive(ctx context.Context, id string) error
}

// SetArchives serves GET /v1/archives and DELETE /v1/archives/{id} from a.
func (s *Server) SetArchives(a Archives) { s.archives = a }

func (s *Server) idleRoutes() []route {
	return []route{{"GET /v1/archives", s.listArchives, socketOnly}, {"DELETE /v1/archives/{id}", s.deleteArchive, socketOnly}}
}

// deleteArchive removes one drive archive: operator only, as listing.
func (s *Server) deleteArchive(w http.ResponseWriter, r *http.Request) {
	if s.archives == nil {
		writeError(w, fmt.Errorf("no drive archive of sandbox %s: %w", r.PathValue("id"), errdefs.ErrNotFound))
		return
	}
	if err := s.archives.DeleteArchive(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listArchives answers the drive archives. They hold the files of deleted sandboxes of
// every owner, so only the operator may list them (socketOnly in the route table).
func (s *Server) listArchives(w http.ResponseWriter, r *http.Request) {
	out := []v1.Archive{}
	if s.archives != nil {
		list, err := s.archives.Archives(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		out = append(out, list...)
	}
	writeJSON(w, http.StatusOK, out)
}
