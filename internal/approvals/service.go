package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Store keeps approvals durably (internal/store implements it with SQLite).
type Store interface {
	InsertApproval(ctx context.Context, a Approval) error
	// GetApproval returns approval id (errdefs.ErrNotFound if none).
	GetApproval(ctx context.Context, id string) (Approval, error)
	// ListApprovals returns the approvals f selects, oldest first.
	ListApprovals(ctx context.Context, f Filter) ([]Approval, error)
	// UpdateApproval runs fn on approval id's current record in a transaction and stores
	// the result; fn may return an error to abort.
	UpdateApproval(ctx context.Context, id string, fn func(*Approval) error) (Approval, error)
}

// Filter selects approvals ("" fields: any).
type Filter struct {
	State, Sandbox, Kind string
}

// Changes decides held git pushes (internal/egress's Manager): deciding a push approval
// decides its change.
type Changes interface {
	ApproveChange(ctx context.Context, sandbox, cid, by, reason string) error
	DenyChange(sandbox, cid, by, reason string) error
}

// Events are the notifications of approvals: "created", "decided" and "expired", each
// with the approval as it is then. The webhook (Webhook.Notify) is one.
type Notifier func(event string, a Approval)

// Event names given to a Notifier.
const (
	EventCreated = "created"
	EventDecided = "decided"
	EventExpired = "expired"
)

// Options configure a Service.
type Options struct {
	Store   Store
	Changes Changes  // nil: push approvals are decided as records only
	Notify  Notifier // nil: none
	// Owner returns the API key owning a sandbox ("" the operator), for approvals the
	// egress proxy asks (nil: "").
	Owner func(ctx context.Context, sandbox string) (string, error)
	// DefaultWait is the deadline of a question without one (0: 2 minutes).
	DefaultWait time.Duration
	Now         func() time.Time
	Log         *slog.Logger
}

// Service stores approvals, wakes those waiting on one when it is decided or expires,
// expires pending ones at their deadline, and tells the notifier. Safe for concurrent use.
type Service struct {
	opt Options

	mu      sync.Mutex
	waiters map[string]chan struct{} // closed when the approval leaves pending
	timers  map[string]*time.Timer   // the deadline of each pending approval
	asks    map[string]*ask          // pending questions of the egress proxy, by askKey
	closed  bool
}

// ask is one pending question of the egress proxy that several held connections of a
// sandbox may share.
type ask struct {
	ready   chan struct{} // closed once id (or err) is set
	id      string
	err     error
	waiting int
}

// New returns a Service; Recover it before serving.
func New(opt Options) *Service {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.DefaultWait <= 0 {
		opt.DefaultWait = 2 * time.Minute
	}
	return &Service{opt: opt, waiters: map[string]chan struct{}{}, timers: map[string]*time.Timer{}, asks: map[string]*ask{}}
}

// Recover runs at the daemon's start: pending network and credential approvals expire
// (the connection they held died with the daemon that held it), every other pending one
// gets its deadline timer (or expires at once when its deadline passed meanwhile).
func (s *Service) Recover(ctx context.Context) error {
	list, err := s.opt.Store.ListApprovals(ctx, Filter{State: Pending})
	if err != nil {
		return fmt.Errorf("recovering approvals: %w", err)
	}
	for _, a := range list {
		switch a.Kind {
		case KindNetwork, KindCredential:
			s.expire(ctx, a.ID, "the daemon restarted: the held connection is gone", true)
		default:
			s.schedule(a)
		}
	}
	return nil
}

// Close stops the deadline timers; waiters return at their own deadline or context.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for id, t := range s.timers {
		t.Stop()
		delete(s.timers, id)
	}
}

// Create stores a new pending approval: a's ID, State, CreatedAt are set here, Deadline
// from wait (≤ 0: the default wait). The asking key and the sandbox owner's key go into
// NotBy. A tool call whose tool is approved for the sandbox (Standing) is stored approved.
func (s *Service) Create(ctx context.Context, a Approval, wait time.Duration) (Approval, error) {
	if err := CheckKind(a.Kind); err != nil {
		return Approval{}, err
	}
	if a.Sandbox == "" {
		return Approval{}, fmt.Errorf("an approval needs a sandbox: %w", errdefs.ErrInvalidArgument)
	}
	if len(a.Action) == 0 || !json.Valid(a.Action) {
		return Approval{}, fmt.Errorf("an approval's action must be JSON: %w", errdefs.ErrInvalidArgument)
	}
	if wait <= 0 {
		wait = s.opt.DefaultWait
	}
	now := s.opt.Now().UTC()
	a.ID, a.State, a.Scope, a.CreatedAt, a.Deadline = NewID(), Pending, "", now, now.Add(wait)
	a.DecidedAt, a.DecidedBy, a.Reason = nil, "", ""
	for _, k := range []string{a.AskedBy, keyOf(a.Owner)} {
		if len(k) > 4 && k[:4] == "key:" && !slices.Contains(a.NotBy, k) {
			a.NotBy = append(a.NotBy, k)
		}
	}
	if a.Kind == KindTool {
		prior, err := s.opt.Store.ListApprovals(ctx, Filter{State: Approved, Sandbox: a.Sandbox, Kind: KindTool})
		if err != nil {
			return Approval{}, err
		}
		a, _ = Standing(prior, a, now)
	}
	if err := s.opt.Store.InsertApproval(ctx, a); err != nil {
		return Approval{}, err
	}
	if a.State == Pending {
		s.schedule(a)
	}
	s.notify(EventCreated, a)
	return a, nil
}

func keyOf(owner string) string {
	if owner == "" {
		return ""
	}
	return "key:" + owner
}

// Get returns approval id.
func (s *Service) Get(ctx context.Context, id string) (Approval, error) {
	if err := CheckID(id); err != nil {
		return Approval{}, err
	}
	return s.opt.Store.GetApproval(ctx, id)
}

// List returns the approvals f selects, oldest first.
func (s *Service) List(ctx context.Context, f Filter) ([]Approval, error) {
	if f.State != "" {
		if err := CheckState(f.State); err != nil {
			return nil, err
		}
	}
	if f.Kind != "" {
		if err := CheckKind(f.Kind); err != nil {
			return nil, err
		}
	}
	return s.opt.Store.ListApprovals(ctx, f)
}

// Decide decides approval id (see the pure Decide for the rules). A push approval decides
// its held change first (approving applies the push); when that fails (the sandbox is not
// running, say) the approval stays pending and the error is returned.
func (s *Service) Decide(ctx context.Context, id string, dec Decision) (Approval, error) {
	a, err := s.Get(ctx, id)
	if err != nil {
		return Approval{}, err
	}
	now := s.opt.Now()
	if _, err := Decide(a, dec, now); err != nil {
		if a.State == Pending && !now.Before(a.Deadline) {
			s.expire(ctx, id, "its deadline passed", false)
		}
		return Approval{}, err
	}
	if a.Kind == KindPush && s.opt.Changes != nil {
		var pa PushAction
		if err := json.Unmarshal(a.Action, &pa); err != nil {
			return Approval{}, fmt.Errorf("approval %s: its action: %w", id, err)
		}
		if dec.Approve {
			err = s.opt.Changes.ApproveChange(context.WithoutCancel(ctx), a.Sandbox, pa.Change, dec.By.String(), dec.Reason)
		} else {
			err = s.opt.Changes.DenyChange(a.Sandbox, pa.Change, dec.By.String(), dec.Reason)
		}
		if err != nil {
			return Approval{}, fmt.Errorf("approval %s: deciding change %s: %w", id, pa.Change, err)
		}
	}
	var changed bool
	out, err := s.opt.Store.UpdateApproval(ctx, id, func(cur *Approval) error {
		if cur.Kind == KindPush && cur.State != Pending && s.opt.Changes != nil {
			return nil // the change's decision closed it already (ChangeDecided)
		}
		next, err := Decide(*cur, dec, s.opt.Now())
		if err != nil {
			return err
		}
		*cur, changed = next, true
		return nil
	})
	if err != nil {
		return Approval{}, err
	}
	if changed {
		s.settled(EventDecided, out)
	}
	return out, nil
}

// ChangeDecided closes the pending push approval of change cid of sandbox (if there is
// one) as the change was decided elsewhere: approved (applied or failed) or denied, by
// whom. The git gate calls it after every decision on a held change.
func (s *Service) ChangeDecided(ctx context.Context, sandbox, cid string, approved bool, by, reason string) {
	list, err := s.opt.Store.ListApprovals(ctx, Filter{State: Pending, Sandbox: sandbox, Kind: KindPush})
	if err != nil {
		s.opt.Log.Warn("closing the approval of a decided change", "sandbox", sandbox, "change", cid, "err", err)
		return
	}
	for _, a := range list {
		var pa PushAction
		if json.Unmarshal(a.Action, &pa) != nil || pa.Change != cid {
			continue
		}
		var changed bool
		out, err := s.opt.Store.UpdateApproval(ctx, a.ID, func(cur *Approval) error {
			var ok bool
			*cur, ok = Close(*cur, approved, by, reason, s.opt.Now())
			changed = ok
			return nil
		})
		if err != nil {
			s.opt.Log.Warn("closing the approval of a decided change", "approval", a.ID, "err", err)
			continue
		}
		if changed {
			s.settled(EventDecided, out)
		}
	}
}

// ExpireGone expires the pending approvals whose sandbox gone says is gone (deleted):
// nobody is left to act on their answer. It returns how many it expired.
func (s *Service) ExpireGone(ctx context.Context, gone func(sandbox string) bool) (int, error) {
	list, err := s.opt.Store.ListApprovals(ctx, Filter{State: Pending})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range list {
		if gone(a.Sandbox) && s.expire(ctx, a.ID, "its sandbox was deleted", true) {
			n++
		}
	}
	return n, nil
}

// Wait returns approval id once it is no longer pending, or as it is when wait passes or
// ctx ends (wait ≤ 0: at once). A decision wakes it within the same process at once.
func (s *Service) Wait(ctx context.Context, id string, wait time.Duration) (Approval, error) {
	a, err := s.Get(ctx, id)
	if err != nil || a.State != Pending || wait <= 0 {
		return a, err
	}
	ch := s.waiter(id)
	// Read again: a decision between the first read and the registration closed no
	// channel this waiter holds.
	if a, err = s.Get(ctx, id); err != nil || a.State != Pending {
		return a, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return a, ctx.Err()
	}
	return s.opt.Store.GetApproval(context.WithoutCancel(ctx), id)
}

func (s *Service) waiter(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.waiters[id]
	if !ok {
		ch = make(chan struct{})
		s.waiters[id] = ch
	}
	return ch
}

// settled wakes the waiters of a (no longer pending), stops its timer and notifies.
func (s *Service) settled(event string, a Approval) {
	s.mu.Lock()
	if ch, ok := s.waiters[a.ID]; ok {
		close(ch)
		delete(s.waiters, a.ID)
	}
	if t, ok := s.timers[a.ID]; ok {
		t.Stop()
		delete(s.timers, a.ID)
	}
	s.mu.Unlock()
	s.notify(event, a)
}

func (s *Service) notify(event string, a Approval) {
	if s.opt.Notify != nil {
		s.opt.Notify(event, a)
	}
}

// schedule sets the deadline timer of pending approval a.
func (s *Service) schedule(a Approval) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if t, ok := s.timers[a.ID]; ok {
		t.Stop()
	}
	d := a.Deadline.Sub(s.opt.Now())
	s.timers[a.ID] = time.AfterFunc(max(d, 0), func() {
		s.expire(context.Background(), a.ID, "nobody decided it before its deadline", false)
	})
}

// expire makes approval id expired when it is pending and its deadline came (or force);
// it says whether it did.
func (s *Service) expire(ctx context.Context, id, reason string, force bool) bool {
	var changed bool
	out, err := s.opt.Store.UpdateApproval(ctx, id, func(cur *Approval) error {
		var ok bool
		*cur, ok = Expire(*cur, s.opt.Now(), reason, force)
		changed = ok
		return nil
	})
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			s.opt.Log.Warn("expiring an approval", "approval", id, "err", err)
		}
		return false
	}
	if changed {
		s.settled(EventExpired, out)
	}
	return changed
}
