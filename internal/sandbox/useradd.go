package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"

	"github.com/moatdev/moat/internal/errdefs"
)

// Adding and removing a sandbox's users (issue 15). The record (Sandbox.Users and
// Sandbox.SharedGroups) is the truth: moat-init makes the sandbox's files match it when a
// user is added, at every start (up), and when the daemon adopts a running sandbox after a
// restart (Reconcile), whatever root inside changed meanwhile.

// AddUser adds a user to a running sandbox: its uid and gid (and those of shared groups it
// is the first member of) are chosen clear of the sandbox's own accounts, recorded, then
// applied inside. A sandbox that is not running is refused (ErrConflict): start it first.
// If applying fails the record is put back.
func (m *Manager) AddUser(ctx context.Context, id string, s UserSpec) (*User, error) {
	if err := CheckUserSpec(s); err != nil {
		return nil, err
	}
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.runningForUsers(ctx, id)
	if err != nil {
		return nil, err
	}
	db, err := m.accountDB(id)
	if err != nil {
		return nil, err
	}
	db.retire(sb.RetiredUIDs)
	u, added, err := planUser(db, sb.Users, sb.SharedGroups, s)
	if err != nil {
		return nil, err
	}
	if err := CheckUser(u); err != nil {
		return nil, err
	}
	sb, err = m.store.Update(ctx, id, func(r *Sandbox) error {
		r.Users = append(r.Users, u)
		r.SharedGroups = append(r.SharedGroups, added...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.at("user-recorded") // failpoint of tests: recorded, not yet made inside
	if err := m.postUsers(ctx, sb); err != nil {
		// Put the record back; moat-init removes what it made of the user at the next
		// apply (an account it marked that the record does not hold).
		if _, uerr := m.store.Update(context.WithoutCancel(ctx), id, func(r *Sandbox) error {
			r.Users = slices.DeleteFunc(r.Users, func(x User) bool { return x.Name == u.Name })
			r.SharedGroups = slices.DeleteFunc(r.SharedGroups, func(g SharedGroup) bool { return slices.Contains(added, g) })
			return nil
		}); uerr != nil {
			m.log.Error("putting back the users of a sandbox", "sandbox", id, "err", uerr)
		}
		return nil, fmt.Errorf("adding user %q inside sandbox %s: %w", u.Name, id, err)
	}
	// Its connections get a source-port range of their own (useregress.go); until then they
	// are told apart from no one. Failing that is logged: the next start applies it.
	if _, err := m.applyUserNetwork(sb); err != nil {
		m.log.Error("per-user source ports after adding a user", "sandbox", id, "user", u.Name, "err", err)
	}
	m.event(ctx, id, "user_added", u.Name)
	m.log.Info("user added", "sandbox", id, "user", u.Name, "uid", u.UID, "groups", u.Groups, "sudo", u.Sudo)
	return &u, nil
}

// Users returns a sandbox's users, in the order they were added.
func (m *Manager) Users(ctx context.Context, id string) ([]User, []SharedGroup, error) {
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if sb.Warm {
		return nil, nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return sb.Users, sb.SharedGroups, nil
}

// RemoveUser removes a user from a running sandbox: its processes are killed, its
// entries and sudoers file removed, its home too unless keepHome; then the record drops
// it. Its shared groups, their directories and gids stay. A crash between the two steps
// leaves the user in the record, and the next apply makes it again (home empty unless
// kept): remove it again.
func (m *Manager) RemoveUser(ctx context.Context, id, name string, keepHome bool) error {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.runningForUsers(ctx, id)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(sb.Users, func(u User) bool { return u.Name == name })
	if i < 0 {
		return fmt.Errorf("sandbox %s has no user %q added by moat: %w", id, name, errdefs.ErrNotFound)
	}
	u := sb.Users[i]
	rest := *sb
	rest.Users = slices.Delete(slices.Clone(sb.Users), i, i+1)
	body := map[string]any{"state": usersState(&rest), "name": u.Name, "uid": u.UID, "keep_home": keepHome}
	if err := m.envdPost(ctx, sb, "/moat/users/remove", body); err != nil {
		return fmt.Errorf("removing user %q inside sandbox %s: %w", name, id, err)
	}
	m.at("user-removed-inside") // failpoint of tests: removed inside, still recorded
	after, err := m.store.Update(ctx, id, func(r *Sandbox) error {
		r.Users = slices.DeleteFunc(r.Users, func(x User) bool { return x.Name == name })
		r.RetiredUIDs = append(r.RetiredUIDs, u.UID)
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := m.setUserNetwork(after); err != nil {
		m.log.Error("per-user source ports after removing a user", "sandbox", id, "user", name, "err", err)
	}
	m.event(ctx, id, "user_removed", name)
	m.log.Info("user removed", "sandbox", id, "user", name, "keep_home", keepHome)
	return nil
}

// runningForUsers returns sandbox id's record if it runs (the caller holds its lock).
func (m *Manager) runningForUsers(ctx context.Context, id string) (*Sandbox, error) {
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Warm {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if sb.State != StateRunning {
		return nil, fmt.Errorf("sandbox %s is %s: users are added and removed while it runs (start or resume it first): %w",
			id, sb.State, errdefs.ErrConflict)
	}
	return sb, nil
}

// accountDB reads the running sandbox's /etc/passwd and /etc/group from its root
// filesystem (through os.Root: the files belong to the sandbox).
func (m *Manager) accountDB(id string) (accountDB, error) {
	root, err := os.OpenRoot(m.paths(id).rootfs)
	if err != nil {
		return accountDB{}, err
	}
	defer root.Close()
	read := func(name string) ([]byte, error) {
		f, err := root.Open(name)
		if os.IsNotExist(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, 4<<20))
	}
	passwd, err := read("etc/passwd")
	if err != nil {
		return accountDB{}, err
	}
	group, err := read("etc/group")
	if err != nil {
		return accountDB{}, err
	}
	return parseAccountDB(passwd, group), nil
}

// applyUsers is up's step for a sandbox with users: users of the record without ids yet
// (given at create) get them, and moat-init makes the sandbox match the record. The caller
// holds the sandbox's lock.
func (m *Manager) applyUsers(ctx context.Context, id string) error {
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if len(sb.Users) == 0 {
		return nil
	}
	if slices.ContainsFunc(sb.Users, func(u User) bool { return u.UID == 0 }) {
		db, err := m.accountDB(id)
		if err != nil {
			return err
		}
		db.retire(sb.RetiredUIDs)
		var users []User
		shared := slices.Clone(sb.SharedGroups)
		for _, p := range sb.Users {
			if p.UID != 0 {
				users = append(users, p)
				continue
			}
			u, added, err := planUser(db, users, shared, UserSpec{Name: p.Name, Groups: p.Groups, Sudo: p.Sudo})
			if err != nil {
				return err
			}
			u.Egress = p.Egress
			if err := CheckUser(u); err != nil {
				return err
			}
			users, shared = append(users, u), append(shared, added...)
		}
		if sb, err = m.store.Update(ctx, id, func(r *Sandbox) error {
			r.Users, r.SharedGroups = users, shared
			return nil
		}); err != nil {
			return err
		}
	}
	if err := m.postUsers(ctx, sb); err != nil {
		return fmt.Errorf("applying the sandbox's users: %w", err)
	}
	// The users made at create have their uids only now: their source ports too.
	if _, err := m.applyUserNetwork(sb); err != nil {
		return fmt.Errorf("applying the sandbox's users: %w", err)
	}
	return nil
}

// usersState is the body of moat-init's POST /moat/users: the record's users and shared
// groups (moat-init ignores the fields it does not use, such as egress).
func usersState(sb *Sandbox) map[string]any {
	users, groups := sb.Users, sb.SharedGroups
	if users == nil {
		users = []User{}
	}
	if groups == nil {
		groups = []SharedGroup{}
	}
	return map[string]any{"users": users, "groups": groups}
}

// postUsers sends the record's users to moat-init.
func (m *Manager) postUsers(ctx context.Context, sb *Sandbox) error {
	return m.envdPost(ctx, sb, "/moat/users", usersState(sb))
}

// envdPost posts body as JSON to moat-init's path; anything but 204 is an error with
// moat-init's message.
func (m *Manager) envdPost(ctx context.Context, sb *Sandbox, path string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+sb.ID+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("X-Access-Token", sb.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.envd.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("reaching moat-init: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("moat-init: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// pendingUsers are a create's users in the record before their ids are chosen (UID 0:
// applyUsers chooses them).
func pendingUsers(specs []UserSpec) []User {
	var out []User
	for _, s := range specs {
		out = append(out, User{Name: s.Name, Groups: slices.Clone(s.Groups), Sudo: s.Sudo})
	}
	return out
}

// reapplyUsers applies the record's users to a running sandbox the daemon adopted after a
// restart (a crash may have come between recording a user and applying it). A paused
// sandbox gets them at its next start. A failure is logged.
func (m *Manager) reapplyUsers(ctx context.Context, sb *Sandbox) {
	if len(sb.Users) == 0 || sb.State != StateRunning {
		return
	}
	unlock := m.lock(sb.ID)
	defer unlock()
	if err := m.applyUsers(ctx, sb.ID); err != nil {
		m.log.Error("re-applying the users of an adopted sandbox", "sandbox", sb.ID, "err", err)
	}
}

// accounts are a sandbox's users as its record holds them: what a fork inherits with its
// parent's files, so that the fork's record names the accounts those files hold (same
// uids, shared groups and retired uids; per-user egress too, from the first start on).
type accounts struct {
	users   []User
	groups  []SharedGroup
	retired []uint32
}

func accountsOf(p *Sandbox) *accounts {
	if len(p.Users) == 0 && len(p.SharedGroups) == 0 && len(p.RetiredUIDs) == 0 {
		return nil
	}
	a := &accounts{groups: slices.Clone(p.SharedGroups), retired: slices.Clone(p.RetiredUIDs)}
	for _, u := range p.Users {
		u.Groups = slices.Clone(u.Groups)
		if u.Egress != nil {
			e := UserEgress{Allow: slices.Clone(u.Egress.Allow), Credentials: slices.Clone(u.Egress.Credentials)}
			u.Egress = &e
		}
		a.users = append(a.users, u)
	}
	return a
}

// applyTo records a's accounts in sb (nil: none).
func (a *accounts) applyTo(sb *Sandbox) {
	if a == nil {
		return
	}
	sb.Users, sb.SharedGroups, sb.RetiredUIDs = a.users, a.groups, a.retired
}
