package egress

import "github.com/moatdev/moat/internal/changes"

// ChangeHooks tell another part of the daemon (the approvals) of held pushes and of the
// decisions on them. Each is called after the change store committed; nil: not called.
type ChangeHooks struct {
	// Held is told of a push the git gate held for a person's decision.
	Held func(r changes.Record)
	// Decided is told of a held change approved (applied or failed) or denied, by
	// ApproveChange or DenyChange.
	Decided func(r changes.Record)
}

// SetChangeHooks sets the hooks; call it before the manager attaches any sandbox.
func (m *Manager) SetChangeHooks(h ChangeHooks) { m.hooks = h }

func (h ChangeHooks) held(r changes.Record) {
	if h.Held != nil {
		h.Held(r)
	}
}

func (h ChangeHooks) decided(r changes.Record) {
	if h.Decided != nil {
		h.Decided(r)
	}
}
